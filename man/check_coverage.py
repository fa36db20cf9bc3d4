"""The manual pages against the code they describe.

mcpbroker.conf(5) must mark up, as Ic or Cm, every word of the grammar in
broker/parse.c: the keywords of each block's table, the words the parser
compares a token with (is_kw, expect_kw, strcmp), and the words of its
lists of accepted values.  mcpbrokerctl(8) must name every command and
option that broker/ctl.c and broker/ctl_mcp.c take, mcpbroker(8) every
option of broker/mcpbroker.c.  A new statement or command without
documentation fails here, with the word that is missing.

usage: check_coverage.py SOURCE-DIR
"""
import os
import re
import shlex
import sys

WORD = r"[a-z][a-z0-9-]*"


def read(src, path):
    with open(os.path.join(src, path), encoding="utf-8") as f:
        return f.read()


def strip_comments(c):
    return re.sub(r"/\*.*?\*/", " ", c, flags=re.S)


def grammar_words(parse_c):
    """Every word the configuration grammar is made of."""
    c = strip_comments(parse_c)
    words = set()
    # { "keyword", handler, repeat } in the block tables
    words |= set(re.findall(r'\{\s*"(%s)",\s*\w+,\s*[01]\s*\}' % WORD, c))
    # { "unit", number }: duration units, rate periods
    words |= set(re.findall(r'\{\s*"(%s)",\s*[\d* ]+\}' % WORD, c))
    # is_kw(t, "word"), expect_kw(p, what, "word")
    words |= set(re.findall(r'is_kw\([^;{}]*?"(%s)"\)' % WORD, c))
    words |= set(re.findall(r'expect_kw\([^;{}]*?"(%s)"\)' % WORD, c))
    # strcmp(value, "word") == 0: accepted values
    words |= set(re.findall(r'strcmp\(\s*\w+(?:\s*\+\s*\w+)?\s*,\s*"(%s)"\)'
                            % WORD, c))
    # static const char *[const] name[] = { "a", "b", ..., NULL };
    for body in re.findall(r'static const char\s*\*\s*(?:const\s+)?\w+\[\]\s*'
                           r'=\s*\{(.*?)\};', c, flags=re.S):
        words |= set(re.findall(r'"(%s)"' % WORD, body))
    return words


def marked_up(page):
    """Words given to Ic or Cm on the page's macro lines."""
    words = set()
    for line in page.splitlines():
        if not line.startswith("."):
            continue
        try:
            toks = shlex.split(line[1:], posix=True)
        except ValueError:
            toks = line[1:].split()
        macro = None
        for t in toks:
            if re.fullmatch(r"[A-Z][A-Za-z]{1,3}", t):
                macro = t
            elif macro in ("Ic", "Cm"):
                words |= set(t.split())
    return words


def ctl_words(ctl_c, ctl_mcp_c):
    """mcpbrokerctl's commands and options, from its argument handling."""
    words = set()
    for c in (strip_comments(ctl_c), strip_comments(ctl_mcp_c)):
        words |= set(re.findall(r'strcmp\(\s*argv\[\d\]\s*,\s*"(%s)"\)'
                                % WORD, c))
        words |= {"--" + w for w in re.findall(
            r'\{\s*"(%s)",\s*(?:required|no|optional)_argument' % WORD, c)}
        for opts in re.findall(r'getopt(?:_long)?\([^;]*?"\+?([A-Za-z:]+)"',
                               c):
            words |= {"-" + ch for ch in opts if ch != ":"}
        words |= set(re.findall(r'strcmp\(\s*argv\[\w+\]\s*,\s*"(--%s|-[A-Za-z])"\)'
                                % WORD, c))
        # subcommands compared once they are in the request: "op"
        words |= set(re.findall(r'strcmp\(\s*cm\.op\s*,\s*"(%s)"\)' % WORD,
                                c))
        words |= set(re.findall(r'"op"\)\),\s*"(%s)"\)' % WORD, c))
    return words


def flags(page):
    """-x options and --long options the page marks with Fl."""
    out = set()
    for line in page.splitlines():
        if not line.startswith("."):
            continue
        toks = line[1:].split()
        for i, t in enumerate(toks):
            if t == "Fl" and i + 1 < len(toks):
                arg = toks[i + 1]
                out.add("--" + arg[1:] if arg.startswith("-") else
                        "-" + arg)
    return out


def main():
    src = sys.argv[1]
    problems = []

    conf = read(src, "man/mcpbroker.conf.5")
    for w in sorted(grammar_words(read(src, "broker/parse.c")) -
                    marked_up(conf)):
        problems.append("mcpbroker.conf.5: grammar word %r (broker/parse.c) "
                        "is not documented (as Ic or Cm)" % w)

    ctl = read(src, "man/mcpbrokerctl.8")
    have = marked_up(ctl) | flags(ctl)
    for w in sorted(ctl_words(read(src, "broker/ctl.c"),
                              read(src, "broker/ctl_mcp.c")) - have):
        problems.append("mcpbrokerctl.8: %r (broker/ctl.c, broker/ctl_mcp.c) "
                        "is not documented" % w)

    daemon = read(src, "man/mcpbroker.8")
    opts = re.search(r'getopt\(argc, argv, "([A-Za-z:]+)"\)',
                     read(src, "broker/mcpbroker.c")).group(1)
    # -P and -S are how the parent starts its children, not for people.
    for ch in sorted(set(opts) - set(":PS")):
        if "-" + ch not in flags(daemon):
            problems.append("mcpbroker.8: option -%s (broker/mcpbroker.c) "
                            "is not documented" % ch)

    for p in problems:
        print(p)
    if problems:
        print("%d undocumented" % len(problems))
        return 1
    print("every keyword, command and option is documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
