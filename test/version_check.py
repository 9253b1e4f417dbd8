#!/usr/bin/env python3
"""make version-check (run by make installcheck, the regress layer): the
version is pg_claim.control's default_version, and every file that repeats
it agrees: META.json (the distribution and pg_claim), debian/changelog's
upstream version; pg_claim_proxy's in META.json is proxy's control file's.
Also the META.json fields that PGXN's Meta spec 1.0.0 requires."""
import json, re, sys, pathlib

root = pathlib.Path(__file__).resolve().parent.parent
errors = []

def control_version(path):
    m = re.search(r"^default_version\s*=\s*'([^']+)'", (root / path).read_text(), re.M)
    return m.group(1) if m else None

version = control_version("pg_claim.control")
proxy = control_version("proxy/pg_claim_proxy.control")
meta = json.loads((root / "META.json").read_text())

for key in ("name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"):
    if key not in meta:
        errors.append(f"META.json: no {key!r} (PGXN Meta spec 1.0.0 requires it)")
if meta.get("meta-spec", {}).get("version") != "1.0.0":
    errors.append("META.json: meta-spec version is not 1.0.0")
semver = re.compile(r"^\d+\.\d+\.\d+$")
for where, got, want in (
        ("META.json version", meta.get("version"), version),
        ("META.json provides.pg_claim.version", meta.get("provides", {}).get("pg_claim", {}).get("version"), version),
        ("META.json provides.pg_claim_proxy.version", meta.get("provides", {}).get("pg_claim_proxy", {}).get("version"), proxy)):
    if got != want:
        errors.append(f"{where} is {got!r}, the control file says {want!r}")
    elif not semver.match(got or ""):
        errors.append(f"{where} {got!r} is not a semantic version")
for name, p in meta.get("provides", {}).items():
    if not (root / p.get("file", "")).is_file():
        errors.append(f"META.json provides.{name}.file {p.get('file')!r} does not exist")

changelog = root / "debian" / "changelog"
if changelog.is_file():
    m = re.match(r"^\S+ \(([^)]+)\)", changelog.read_text())
    upstream = m and re.sub(r"-[^-]*$", "", m.group(1))
    if upstream != version:
        errors.append(f"debian/changelog's version is {m and m.group(1)!r}, the control file says {version!r}")


# The README's quick start is tested as written: test/sql/quickstart.sql
# holds the SQL block after the README's "<!-- quickstart" marker (README.md).
quick = (root / "test" / "sql" / "quickstart.sql")
blocks = []
for doc in ("README.md",):
    p = root / doc
    if p.is_file() and "<!-- quickstart" in p.read_text():
        t = p.read_text()
        start = t.index("```sql\n", t.index("<!-- quickstart")) + len("```sql\n")
        blocks.append((doc, t[start:t.index("```\n", start)]))
if not blocks:
    errors.append("no README holds a <!-- quickstart --> block")
for doc, block in blocks:
    if not quick.is_file() or block not in quick.read_text():
        errors.append(f"test/sql/quickstart.sql does not hold the quick start of {doc} as written")
for e in errors:
    print("version-check:", e, file=sys.stderr)
if errors:
    sys.exit(1)
print(f"version-check: {version} (pg_claim_proxy {proxy}) in pg_claim.control, META.json, debian/changelog; the quick start of {', '.join(d for d, _ in blocks)}")
