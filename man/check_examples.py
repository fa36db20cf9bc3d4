"""The examples of mcpbroker.conf(5) are configurations mcpbroker accepts.

Each literal display of the page is written to a file and checked with
`mcpbroker -n`, which also reads every secret it names: the files the
example names under /etc/mcpbroker are made in a temporary directory
(a JWK set, an Ed25519 key, one-line secrets, empty includes), the
variables it names are set, and -D credentials= points at a directory
holding what `$credentials/NAME` names.

usage: check_examples.py MCPBROKER PAGE
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def displays(page):
    out, cur = [], None
    for line in page.splitlines():
        if line.startswith(".Bd -literal"):
            cur = []
        elif line.startswith(".Ed") and cur is not None:
            out.append("\n".join(cur).replace("\\e", "\\") + "\n")
            cur = None
        elif cur is not None:
            cur.append(line)
    return out


def prepare(text, tmp):
    etc = os.path.join(tmp, "etc")
    creds = os.path.join(tmp, "credentials")
    os.makedirs(creds, exist_ok=True)
    text = text.replace("/etc/mcpbroker", etc)
    for kw, path in re.findall(r'(\S+)\s+"(%s/[^"]+)"' % re.escape(etc),
                               text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if kw == "jwks-file":
            with open(path, "w") as f:
                json.dump({"keys": [{"kty": "oct", "alg": "HS256",
                                     "k": "c2VjcmV0" * 6}]}, f)
        elif kw == "signing-key-file":
            subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519",
                            "-out", path], check=True,
                           capture_output=True)
        elif kw == "include":
            open(path, "w").close()
        else:
            with open(path, "w") as f:
                f.write("example-secret\n")
    for name in re.findall(r"\$credentials/([A-Za-z0-9_.-]+)", text):
        with open(os.path.join(creds, name), "w") as f:
            f.write("example-secret\n")
    env = dict(os.environ)
    for name in re.findall(r'-env\s+"([A-Za-z_][A-Za-z0-9_]*)"', text):
        env[name] = "example-secret"
    return text, creds, env


def main():
    mcpbroker, page = sys.argv[1], sys.argv[2]
    with open(page, encoding="utf-8") as f:
        blocks = displays(f.read())
    failed = 0
    for i, text in enumerate(blocks, 1):
        if "listen on" not in text:
            text = "listen on 127.0.0.1 port 8080\n" + text
        tmp = tempfile.mkdtemp(prefix="mcpbroker-example-")
        try:
            text, creds, env = prepare(text, tmp)
            conf = os.path.join(tmp, "example.conf")
            with open(conf, "w") as f:
                f.write(text)
            r = subprocess.run([mcpbroker, "-n", "-f", conf, "-D",
                                "credentials=" + creds], env=env,
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                failed += 1
                print("example %d of %s is refused:\n%s%s\n"
                      % (i, page, r.stdout, r.stderr))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d examples, %d refused" % (len(blocks), failed))
    return 1 if failed or not blocks else 0


if __name__ == "__main__":
    sys.exit(main())
