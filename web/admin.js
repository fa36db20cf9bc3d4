document.getElementById('app').textContent = 'mcpbroker console';
