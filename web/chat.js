document.getElementById('app').textContent = 'mcpbroker';
