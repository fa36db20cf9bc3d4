"""The Debian package, built, checked, installed, upgraded and purged on
this machine (CI runs as root on a fresh Debian 12).

From a copy of the source tree under /tmp: `dpkg-buildpackage -us -uc -b`
with packaging/debian as debian/, lintian on the result, then a second
build of the same tree with a later changelog entry.  Version N is
installed with `dpkg -i`: the user, the directories, the conffile and its
mode, the unit (`systemd-analyze verify`, and `security --offline`
against the exposure docs/SECURITY.md states).  The installed daemon is
started as its unit would start it (ExecStartPre, then ExecStart, with
the unit's capability bounding set, no_new_privs, umask and a credentials
directory for %d; systemd need not be PID 1), on the installed
configuration with a provider whose key is a credential and a stdio MCP
server without network added by hand: /healthz, `mcpbrokerctl status`,
a user and its key, a backup, the server's instance as _mcpbroker-mcp with no
capabilities and no network, a reload.  Then version N+1 over it: the
configuration untouched, the user and key still good, the audit trail
intact.  `dpkg -r` keeps the state and the user, `dpkg --purge` removes
them.

Exit 77 (skipped) when not root, without the Debian tools, or when an
mcpbroker package is installed already: that one is not ours to remove.
"""
import grp
import hashlib
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SRC = os.path.abspath(os.environ.get("MCPBROKER_SRC") or
                      os.path.join(os.path.dirname(__file__), "..", ".."))
CONF = "/etc/mcpbroker/mcpbroker.conf"
STATE = "/var/lib/mcpbroker"
UNIT = "/lib/systemd/system/mcpbroker.service"
SOCK = "/run/mcpbroker/control.sock"
URL = "http://127.0.0.1:8080"
# docs/SECURITY.md, "systemd unit": the exposure the unit is to keep.
EXPOSURE_MAX = "3.0"


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(77)


def run(cmd, check=True, log=None, **kw):
    """cmd (a list), its output captured; on failure the output is shown."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if log is not None:
        with open(log, "a") as f:
            f.write("$ %s\n%s" % (" ".join(cmd), r.stdout))
    if check and r.returncode != 0:
        out = r.stdout if log is None else "\n".join(
            r.stdout.splitlines()[-60:])
        raise AssertionError("%s: exit %d\n%s" % (" ".join(cmd),
                                                  r.returncode, out))
    return r


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok: " + what)


def http(path, key=None):
    req = urllib.request.Request(URL + path)
    if key is not None:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_for(pred, what, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def installed_version():
    r = run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Version}",
             "mcpbroker"], check=False)
    return r.stdout.split() if r.returncode == 0 else []


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def ctl(*args, check_rc=True):
    return run(["/usr/bin/mcpbrokerctl"] + list(args), check=check_rc)


class Unit:
    """The installed unit's Exec lines and sandbox, as systemd would run
    them: what systemd-analyze cannot do without systemd as PID 1."""

    def __init__(self, path, creds):
        self.creds = creds
        self.settings = {}
        self.exec = {}
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith(("#", "[")):
                    continue
                k, _, v = line.partition("=")
                self.settings[k] = v
                self.exec.setdefault(k, []).append(v)

    def argv(self, key, index=0):
        v = self.exec[key][index].replace("%d", self.creds)
        return shlex.split(v)

    def wrapper(self):
        caps = self.settings["CapabilityBoundingSet"].split()
        bset = "-all," + ",".join("+" + c[4:].lower() for c in caps)
        w = ["setpriv", "--bounding-set", bset, "--inh-caps", "-all"]
        if self.settings.get("NoNewPrivileges") == "yes":
            w.append("--no-new-privs")
        return w

    def env(self):
        return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                "/sbin:/bin", "CREDENTIALS_DIRECTORY": self.creds}

    def umask(self):
        return int(self.settings.get("UMask", "0022"), 8)


class Daemon:
    def __init__(self, unit, log):
        self.unit = unit
        self.log = log
        self.proc = None

    def start(self):
        for d in ("StateDirectory", "RuntimeDirectory"):
            # What systemd makes before ExecStartPre.
            path = {"StateDirectory": STATE,
                    "RuntimeDirectory": "/run/mcpbroker"}[d]
            os.makedirs(path, exist_ok=True)
        old = os.umask(self.unit.umask())
        try:
            run(self.unit.wrapper() + self.unit.argv("ExecStartPre"),
                env=self.unit.env())
            self.logf = open(self.log, "a")
            self.proc = subprocess.Popen(
                self.unit.wrapper() + self.unit.argv("ExecStart"),
                env=self.unit.env(), stdin=subprocess.DEVNULL,
                stdout=self.logf, stderr=subprocess.STDOUT)
        finally:
            os.umask(old)
        wait_for(lambda: self.alive() and http("/healthz")[0] == 200,
                 "/healthz")

    def alive(self):
        if self.proc.poll() is not None:
            with open(self.log) as f:
                raise AssertionError("mcpbroker exited %s:\n%s"
                                     % (self.proc.returncode,
                                        f.read()[-4000:]))
        return True

    def reload(self):
        old = os.umask(self.unit.umask())
        try:
            run(self.unit.wrapper() + self.unit.argv("ExecReload", 0),
                env=self.unit.env())
        finally:
            os.umask(old)
        self.proc.send_signal(signal.SIGHUP)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.logf.close()
        self.proc = None


def copy_tree(dst):
    """The source tree as a clean checkout has it, plus new files."""
    os.makedirs(dst)
    if os.path.isdir(os.path.join(SRC, ".git")) or os.path.isfile(
            os.path.join(SRC, ".git")):
        files = run(["git", "-C", SRC, "ls-files", "-z", "-c", "-o",
                     "--exclude-standard"]).stdout.split("\0")
    else:
        files = []
        for root, dirs, names in os.walk(SRC):
            dirs[:] = [d for d in dirs if not d.startswith(("build", "."))
                       and d not in ("node_modules", "run")]
            files += [os.path.relpath(os.path.join(root, n), SRC)
                      for n in names]
    for rel in files:
        if not rel or rel.startswith("tests/node_modules/"):
            continue
        src = os.path.join(SRC, rel)
        if not os.path.isfile(src):
            continue
        os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, rel))
    shutil.copytree(os.path.join(dst, "packaging", "debian"),
                    os.path.join(dst, "debian"))


def build(tree, log, env, clean=True):
    cmd = ["dpkg-buildpackage", "-us", "-uc", "-b"]
    if not clean:
        cmd.append("-nc")
    run(cmd, cwd=tree, log=log, env=env)


def bump_changelog(tree, version):
    path = os.path.join(tree, "debian", "changelog")
    with open(path) as f:
        old = f.read()
    m = re.search(r"^ -- (.+?)  ", old, flags=re.M)
    date = run(["date", "-R"]).stdout.strip()
    with open(path, "w") as f:
        f.write("mcpbroker (%s) unstable; urgency=medium\n\n"
                "  * A later version, for the upgrade test.\n\n"
                " -- %s  %s\n\n%s" % (version, m.group(1), date, old))


def main():
    if os.geteuid() != 0:
        skip("the package test installs a package: run as root")
    for tool in ("dpkg-buildpackage", "dh", "lintian", "setpriv",
                 "systemd-analyze", "sqlite3"):
        if shutil.which(tool) is None:
            skip("%s is missing (sh packaging/install-deps)" % tool)
    if installed_version():
        skip("an mcpbroker package is installed on this machine already")
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8080)) == 0:
            raise AssertionError("127.0.0.1:8080, which the installed "
                                 "configuration listens on, is in use")

    work = tempfile.mkdtemp(prefix="pkg-test-", dir="/tmp")
    os.chmod(work, 0o755)       # read by the server's _mcpbroker-mcp
    log = os.path.join(work, "build.log")
    tree = os.path.join(work, "src")
    creds = os.path.join(work, "credentials")
    daemon = None
    ok = False
    try:
        env = dict(os.environ, DEB_BUILD_OPTIONS="parallel=%d"
                   % (os.cpu_count() or 2))
        env.pop("MAKEFLAGS", None)
        env.pop("MFLAGS", None)
        copy_tree(tree)
        t0 = time.monotonic()
        build(tree, log, env)
        version = run(["dpkg-parsechangelog", "-S", "Version"],
                      cwd=tree).stdout.strip()
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        deb = os.path.join(work, "mcpbroker_%s_%s.deb" % (version, arch))
        changes = os.path.join(work, "mcpbroker_%s_%s.changes"
                               % (version, arch))
        check(os.path.isfile(deb), "built %s in %.0f s"
              % (os.path.basename(deb), time.monotonic() - t0))
        with open(os.path.join(SRC, "CMakeLists.txt")) as f:
            cmake_version = re.search(r"project\(mcpbroker VERSION ([0-9.]+)",
                                      f.read()).group(1)
        check(version == cmake_version or version.startswith(
              cmake_version + "-"), "the package's version %s is "
              "CMakeLists.txt's" % version)
        r = run(["lintian", "--fail-on", "error,warning", changes],
                check=False)
        check(r.returncode == 0, "lintian --fail-on error,warning on %s%s"
              % (os.path.basename(changes), ("\n" + r.stdout) if
                 r.returncode else ""))

        # N+1: the same tree, a later changelog entry.
        new_version = version + "+upgradetest1"
        bump_changelog(tree, new_version)
        build(tree, log, env, clean=False)
        new_deb = os.path.join(work, "mcpbroker_%s_%s.deb"
                               % (new_version, arch))
        check(os.path.isfile(new_deb), "built %s" % os.path.basename(new_deb))

        # -- install N ---------------------------------------------------
        run(["dpkg", "-i", deb])
        check(installed_version() == ["ii", version], "installed " + version)
        pw = pwd.getpwnam("_mcpbroker")
        check(pw.pw_uid < 1000 and pw.pw_dir == STATE and
              pw.pw_shell in ("/usr/sbin/nologin", "/bin/false"),
              "system user _mcpbroker (uid %d, home %s, shell %s)"
              % (pw.pw_uid, pw.pw_dir, pw.pw_shell))
        check(grp.getgrnam("_mcpbroker").gr_gid == pw.pw_gid,
              "its group _mcpbroker")
        st = os.stat(STATE)
        check(stat.S_IMODE(st.st_mode) == 0o750 and st.st_uid == pw.pw_uid
              and st.st_gid == pw.pw_gid, STATE + " 0750 _mcpbroker")
        st = os.stat(CONF)
        check(stat.S_IMODE(st.st_mode) == 0o640 and st.st_uid == 0 and
              st.st_gid == pw.pw_gid, CONF + " 0640 root:_mcpbroker")
        conffiles = run(["dpkg-query", "-W", "-f=${Conffiles}",
                         "mcpbroker"]).stdout
        check(CONF in conffiles, CONF + " is a conffile")
        for path in ("/usr/sbin/mcpbroker", "/usr/bin/mcpbrokerctl", UNIT,
                     "/usr/share/man/man8/mcpbroker.8.gz",
                     "/usr/share/man/man8/mcpbrokerctl.8.gz",
                     "/usr/share/man/man5/mcpbroker.conf.5.gz"):
            check(os.path.exists(path), "installed " + path)
        man = [] if shutil.which("man") else ["--man=no"]
        r = run(["systemd-analyze", "verify"] + man + [UNIT], check=False)
        check(r.returncode == 0 and r.stdout.strip() == "",
              "systemd-analyze verify %s is clean%s" % (UNIT, (
                  "\n" + r.stdout) if r.stdout.strip() else ""))
        r = run(["systemd-analyze", "security", "--offline=yes",
                 "--no-pager", UNIT], check=False)
        m = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)",
                      r.stdout)
        check(m is not None and float(m.group(1)) <= float(EXPOSURE_MAX),
              "systemd-analyze security: exposure %s %s (at most %s)"
              % (m.group(1) if m else "?", m.group(2) if m else "",
                 EXPOSURE_MAX))

        # -- the installed daemon, as its unit starts it -------------------
        os.makedirs(creds, mode=0o700)
        with open(os.path.join(creds, "openai"), "w") as f:
            f.write("sk-test-credential\n")
        probe_dir = os.path.join(work, "probe")
        os.makedirs(probe_dir)
        os.chmod(probe_dir, 0o755)
        probe = os.path.join(probe_dir, "net_probe.py")
        shutil.copy(os.path.join(SRC, "tests", "fixtures", "net_probe.py"),
                    probe)
        os.chmod(probe, 0o644)
        # The administrator's additions: a provider whose key is a
        # credential, a server with no network.  Kept over the upgrade.
        with open(CONF, "a") as f:
            f.write('\nprovider "openai" {\n\ttype openai\n'
                    '\tbase-url "http://127.0.0.1:9/v1"\n'
                    '\tapi-key-file $credentials/openai\n'
                    '\tmodel "gpt-4o-mini"\n}\n'
                    'server "probe" {\n\tcommand "/usr/bin/python3" "%s"\n'
                    '\tnetwork none\n\tfilesystem read "%s"\n}\n'
                    % (probe, probe_dir))
        conf_sum = sha256(CONF)
        unit = Unit(UNIT, creds)
        daemon = Daemon(unit, os.path.join(work, "daemon.log"))
        daemon.start()
        check(True, "the daemon started under %s" % " ".join(
              unit.wrapper()))
        wait_for(lambda: http("/readyz")[0] == 200, "/readyz 200")
        status = ctl("status").stdout
        check(re.search(r"^controller\s+\d+\s+running", status, re.M) and
              re.search(r"^frontend\s+\d+\s+running", status, re.M),
              "mcpbrokerctl status: frontend and controller running")
        for line in status.splitlines()[1:]:
            name, pid = re.match(r"^(.+?)\s+(\d+)\s", line).groups()
            if name == "parent":
                continue
            with open("/proc/%s/status" % pid) as f:
                uid = re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1)
            check(int(uid) == pw.pw_uid, "%s runs as _mcpbroker" % name)
        key = ctl("user", "add", "-r", "analyst", "alice").stdout \
            .strip().splitlines()[-1]
        check(http("/llmchat/status/alice", key)[0] == 200,
              "alice's key is accepted")
        check(http("/llmchat/status/alice")[0] == 401,
              "no key, no answer (auth { api-keys })")
        for f in os.listdir(STATE):
            st = os.stat(os.path.join(STATE, f))
            check(st.st_uid == pw.pw_uid and not st.st_mode & 0o007,
                  "%s/%s belongs to _mcpbroker, mode %o" % (
                      STATE, f, stat.S_IMODE(st.st_mode)))
        tools = json.loads(ctl("server", "tools", "probe").stdout)
        check({t["name"] for t in tools} >= {"connect", "whoami"},
              "the stdio server's tools")
        who = json.loads(ctl("server", "call", "probe", "whoami", "{}")
                         .stdout)["structuredContent"]
        mcp = pwd.getpwnam("_mcpbroker-mcp")
        check(mcp.pw_uid < 1000 and mcp.pw_uid != pw.pw_uid and
              mcp.pw_dir == "/var/lib/mcpbroker-mcp",
              "system user _mcpbroker-mcp (uid %d, home %s)"
              % (mcp.pw_uid, mcp.pw_dir))
        check(who["uid"] == mcp.pw_uid and who["status"]["CapBnd"] ==
              "0000000000000000" and who["status"]["NoNewPrivs"] == "1",
              "its instance runs as _mcpbroker-mcp (instance-user), "
              "no capabilities, no_new_privs")
        out = json.loads(ctl("server", "call", "probe", "connect",
                             '{"host": "127.0.0.1", "port": 8080}').stdout)
        check("unreachable" in json.dumps(out),
              "network none: it cannot reach 127.0.0.1:8080")
        backup = os.path.join(work, "backup.db")
        ctl("backup", backup)
        check(run(["sqlite3", backup, "PRAGMA integrity_check"])
              .stdout.strip() == "ok", "mcpbrokerctl backup: a sound copy")
        daemon.reload()
        time.sleep(1)
        check(daemon.alive() and http("/healthz")[0] == 200,
              "ExecReload: checked, then SIGHUP; still serving")
        check(ctl("audit", "verify").returncode == 0, "audit trail intact")

        # -- upgrade to N+1 ------------------------------------------------
        daemon.stop()       # what the new package's preinst has systemd do
        run(["dpkg", "-i", new_deb])
        check(installed_version() == ["ii", new_version],
              "upgraded to " + new_version)
        check(sha256(CONF) == conf_sum, "the configuration is untouched")
        st = os.stat(CONF)
        check(stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == pw.pw_gid,
              "still 0640 root:_mcpbroker")
        daemon.start()
        check(http("/llmchat/status/alice", key)[0] == 200,
              "alice's key still works")
        check("alice" in ctl("user", "list").stdout, "alice is still there")
        check(ctl("audit", "verify").returncode == 0,
              "the audit trail is intact")
        daemon.stop()

        # -- remove, then purge --------------------------------------------
        run(["dpkg", "-r", "mcpbroker"])
        check(installed_version()[:1] == ["rc"] and not os.path.exists(
              "/usr/sbin/mcpbroker"), "dpkg -r: the program is gone")
        check(os.path.isfile(os.path.join(STATE, "mcpbroker.db")) and
              os.path.isfile(CONF), "dpkg -r: the state and the "
              "configuration stay")
        check(pwd.getpwnam("_mcpbroker").pw_uid == pw.pw_uid,
              "dpkg -r: the user stays")
        run(["dpkg", "--purge", "mcpbroker"])
        check(installed_version() == [], "dpkg --purge: the package is gone")
        check(not os.path.exists(STATE), "dpkg --purge: %s is gone" % STATE)
        check(not os.path.exists(CONF), "dpkg --purge: %s is gone" % CONF)
        try:
            pwd.getpwnam("_mcpbroker")
            gone = False
        except KeyError:
            gone = True
        check(gone, "dpkg --purge: the user _mcpbroker is gone")
        try:
            pwd.getpwnam("_mcpbroker-mcp")
            gone = False
        except KeyError:
            gone = True
        check(gone and not os.path.exists("/var/lib/mcpbroker-mcp"),
              "dpkg --purge: the user _mcpbroker-mcp and its home are gone")
        check(run(["dpkg-statoverride", "--list", CONF],
                  check=False).returncode != 0,
              "dpkg --purge: no statoverride left")
        ok = True
    finally:
        if daemon is not None:
            daemon.stop()
        if installed_version():
            run(["dpkg", "--purge", "mcpbroker"], check=False)
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("left for inspection: " + work)
    print("package test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
