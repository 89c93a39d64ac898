"""The documentation check: docs/ops.md lists every overload registered for tpu,
docs/environment.md names every environment variable the code reads, and every
relative link in README.md and docs/*.md points to a file of this repository."""
import importlib.util
import os
import re

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs")


def _read(*parts):
    with open(os.path.join(REPO, *parts), encoding="utf-8") as f:
        return f.read()


def _gen_ops_doc():
    spec = importlib.util.spec_from_file_location("gen_ops_doc", os.path.join(REPO, "tools", "gen_ops_doc.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- docs/ops.md

REGENERATE = "regenerate it: .venv/bin/python tools/gen_ops_doc.py"


@pytest.fixture(scope="module")
def ops():
    gen = _gen_ops_doc()
    return gen, gen.collect(), gen.listed_in_doc(_read("docs", "ops.md"))


def test_ops_doc_lists_every_registered_overload(ops):
    _, info, documented = ops
    missing = sorted({r["name"] for r in info["listed"]} - set(documented))
    assert not missing, f"docs/ops.md misses {len(missing)} tpu overload(s): {missing[:20]}; {REGENERATE}"


def test_ops_doc_lists_every_named_registration(ops):
    """The overloads PyTorch reports as registered by name for PrivateUse1."""
    _, _, documented = ops
    named = {n for n in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
             if n.startswith("aten::")}
    assert named, "no aten overload registered for PrivateUse1: is torchtpu imported?"
    missing = sorted(named - set(documented))
    assert not missing, f"docs/ops.md misses {missing}; {REGENERATE}"


def test_ops_doc_lists_nothing_unregistered(ops):
    _, info, documented = ops
    assert len(documented) == len(set(documented)), "docs/ops.md lists an overload twice"
    stale = sorted(set(documented) - {r["name"] for r in info["listed"]})
    assert not stale, f"docs/ops.md lists overloads that no longer run on tpu: {stale[:20]}; {REGENERATE}"


# ---------------------------------------------------------------- docs/environment.md

# Directories whose sources are scanned for environment variables.
SCANNED = ["runtime", "torchtpu", "tests", "bench", "tools"]
SOURCE_EXT = (".c", ".h", ".cpp", ".py")
# Reads of any variable by its quoted name: getenv (C, C++, Python's os.getenv),
# os.environ.get, os.environ[...], os.environ.pop and os.environ.setdefault.
_READ_RE = re.compile(r"""(?:getenv\(\s*|environ\.(?:get|pop|setdefault)\(\s*|environ\[\s*)["']([A-Za-z_][A-Za-z0-9_]*)["']""")
# Any TORCHTPU_* name the code spells out: as a whole string literal (a getenv-like
# helper's argument, an env dict key) or as a keyword (dict(os.environ, NAME=...)).
_OURS_RE = re.compile(r"""["'](TORCHTPU_[A-Z0-9_]+)["']|\b(TORCHTPU_[A-Z0-9_]+)=""")


def _sources():
    for top in SCANNED:
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    yield os.path.join(root, f)


def env_vars_read() -> dict:
    """{variable: [files that read it]} over the scanned sources."""
    found = {}
    for path in _sources():
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        names = set(_READ_RE.findall(text))
        names |= {a or b for a, b in _OURS_RE.findall(text)}
        for n in names:
            found.setdefault(n, []).append(os.path.relpath(path, REPO))
    return found


def test_env_scan_finds_the_known_variables():
    found = env_vars_read()
    for name in ("TORCHTPU_PJRT_PLUGIN", "TORCHTPU_CACHE_DIR", "TORCHTPU_DUMP_DIR", "TORCHTPU_CPU_FALLBACK",
                 "TORCHTPU_GRAPH_PROGRAMS", "XDG_CACHE_HOME"):
        assert name in found, f"the scan no longer sees {name}: fix env_vars_read()"


def test_environment_doc_names_every_variable():
    doc = _read("docs", "environment.md")
    missing = {n: files for n, files in sorted(env_vars_read().items())
               if not re.search(r"`" + re.escape(n) + r"[`=]", doc)}
    assert not missing, "docs/environment.md does not describe: " + "; ".join(
        f"{n} (read in {', '.join(files[:3])})" for n, files in missing.items())


# ---------------------------------------------------------------- links

_LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _pages():
    yield os.path.join(REPO, "README.md")
    for f in sorted(os.listdir(DOCS)):
        if f.endswith(".md"):
            yield os.path.join(DOCS, f)


def _relative_links(path):
    text = re.sub(r"```.*?```", "", open(path, encoding="utf-8").read(), flags=re.S)  # not in code blocks
    for a, b in _LINK_RE.findall(text):
        target = a or b
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        yield target


def test_relative_links_point_to_files_in_the_repository():
    broken = []
    for page in _pages():
        for target in _relative_links(page):
            dest = os.path.normpath(os.path.join(os.path.dirname(page), target.split("#", 1)[0]))
            rel = os.path.relpath(page, REPO)
            if os.path.relpath(dest, REPO).startswith(".."):
                broken.append(f"{rel}: {target} (outside the repository)")
            elif not os.path.exists(dest):
                broken.append(f"{rel}: {target} (no such file)")
    assert not broken, "broken links:\n  " + "\n  ".join(broken)


def test_docs_index_links_every_page():
    index = _read("docs", "README.md")
    linked = {os.path.normpath(t.split("#", 1)[0]) for t in _relative_links(os.path.join(DOCS, "README.md"))}
    pages = {f for f in os.listdir(DOCS) if f.endswith(".md") and f != "README.md"}
    unlisted = sorted(pages - linked)
    assert not unlisted, f"docs/README.md does not link {unlisted}"
    assert index
