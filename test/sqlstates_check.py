#!/usr/bin/env python3
"""make sqlstate-check (run by make installcheck, the regress layer): the
SQLSTATEs kept in four places agree.

  - the server: src/core/error.hpp (constants, and the PCxxx raised
    elsewhere named in its comments), and the PCxxx raised by the SQL
    scripts of this version (sql/*--*.sql) and by the front (proxy/);
  - the docs: docs/errors.md's tables;
  - the clients: the SQLSTATE to error class maps of clients/python
    (pg_claim/errors.py), clients/node (lib/errors.js) and clients/go
    (errors.go), and every PCxxx any client's source names.

Checks: every pg_claim SQLSTATE (PCxxx) the server defines or raises is in
docs/errors.md and every one there is defined by the server; every SQLSTATE
constant of error.hpp is in docs/errors.md; every PCxxx a client names is
documented; the three clients map the same SQLSTATEs (their own classes plus
the transient ones)."""
import pathlib, re, sys

root = pathlib.Path(__file__).resolve().parent.parent
errors = []
PC = re.compile(r"\bPC\d{3}\b")
CODE = r"([0-9A-Z]{5})"


def text(path):
    return (root / path).read_text(encoding="utf-8")


def codes_in(pattern, s):
    return set(re.findall(pattern, s, re.M))


# the server
error_hpp = text("src/core/error.hpp")
server_consts = codes_in(r'constexpr const char \*\w+ = "' + CODE + '"', error_hpp)
server_pc = set(PC.findall(error_hpp))
for path in sorted(root.glob("sql/pg_claim--*--*.sql")) + sorted(root.glob("proxy/*.sql")):
    server_pc |= set(PC.findall(path.read_text(encoding="utf-8")))
for path in sorted(root.glob("src/**/*.[ch]pp")):
    server_pc |= set(PC.findall(path.read_text(encoding="utf-8")))

# the docs: the first column of every table row in docs/errors.md
docs = codes_in(r"^\| `" + CODE + "`", text("docs/errors.md"))

for c in sorted(server_pc - docs):
    errors.append(f"{c}: raised by the server, not in docs/errors.md")
for c in sorted({c for c in docs if c.startswith("PC")} - server_pc):
    errors.append(f"{c}: in docs/errors.md, raised nowhere in src/, sql/ or proxy/")
for c in sorted(server_consts - docs):
    errors.append(f"{c}: a constant of src/core/error.hpp, not in docs/errors.md")

# the clients
def block(s, start, end):
    i = s.index(start)
    return s[i:s.index(end, i)]

clients = {}
try:
    py = text("clients/python/pg_claim/errors.py")
    clients["python"] = (codes_in(r'"' + CODE + r'":', block(py, "_BY_SQLSTATE", "}"))
                         | codes_in(r'"' + CODE + '"', block(py, "TRANSIENT_SQLSTATES =", ")"))
                         | codes_in(r'"' + CODE + '"', block(py, "BAD_CONNECTION_SQLSTATES =", ")")))
    js = text("clients/node/lib/errors.js")
    clients["node"] = (codes_in(r"^\s*'?" + CODE + r"'?:", block(js, "const BY_CODE", "};"))
                       | codes_in(r"'" + CODE + "'", block(js, "const TRANSIENT_CODES", ";")))
    go = text("clients/go/errors.go")
    clients["go"] = codes_in(r'"' + CODE + r'":', block(go, "var bySQLState", "}"))
except (OSError, ValueError) as e:
    errors.append(f"a client's SQLSTATE map was not found: {e}")

names = sorted(clients)
for a in names:
    for b in names:
        if a < b and clients[a] != clients[b]:
            errors.append(f"clients {a} and {b} map different SQLSTATEs: only {a}: "
                          f"{sorted(clients[a] - clients[b])}, only {b}: {sorted(clients[b] - clients[a])}")

for path in sorted((root / "clients").rglob("*")):
    if path.suffix in (".py", ".js", ".ts", ".go", ".md") and "node_modules" not in path.parts:
        for c in sorted(set(PC.findall(path.read_text(encoding="utf-8"))) - docs):
            errors.append(f"{c}: named in {path.relative_to(root)}, not in docs/errors.md")

if errors:
    print("sqlstate-check: the SQLSTATE lists disagree:", file=sys.stderr)
    for e in errors:
        print("  " + e, file=sys.stderr)
    sys.exit(1)
print(f"sqlstate-check: {len(server_pc)} pg_claim SQLSTATEs and {len(server_consts)} constants "
      f"documented; {len(names)} clients map the same {len(clients[names[0]]) if names else 0} SQLSTATEs")
