"""The code's shape: the README's Layout section names what is in the tree, no module
reaches into another's private names, and the tests read pages with one HTML reader."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = ("ctxview", "manifests", "sdk/ctxkit", "tests", "sdk/tests", "bench")


def layout_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("## Layout", 1)[1].split("\n## ", 1)[0]


def named_in(text: str) -> set[str]:
    """Every `word` in backquotes, with a trailing slash or .py dropped."""
    return {re.sub(r"(/|\.py)$", "", name) for name in re.findall(r"`([^`\s]+)`", text)}


def test_it_names_every_package_and_module_of_the_app_in_the_readme():
    named = named_in(layout_section())
    app = ROOT / "manifests"
    missing = []
    for path in sorted(app.iterdir()):
        if path.name.startswith(("_", ".")) or path.name == "__pycache__":
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            if path.name not in named:
                missing.append(f"{path.name}/")
            if path.name in ("migrations", "templatetags", "management", "selectors", "views"):
                continue
            missing += [f"{path.name}/{m.stem}" for m in sorted(path.glob("*.py"))
                        if not m.stem.startswith("_") and m.stem not in named]
        elif path.suffix == ".py" and path.stem not in named:
            missing.append(path.name)
    assert missing == []


def test_it_names_only_what_exists():
    section = layout_section()
    folders = [name.rstrip("/") for name in re.findall(r"`([^`\s]+/)`", section) if not name.startswith(".")]
    assert "manifests" in folders, "the walk sees the section"
    tree = {path.relative_to(ROOT).as_posix() for top in (*CODE, "templates", "static", "docs")
            for path in [ROOT / top, *(ROOT / top).rglob("*")] if path.is_dir()}
    for name in folders:
        assert any(found == name or found.endswith(f"/{name}") for found in tree), name


def private_imports() -> list[str]:
    found = []
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "node_modules" in path.parts:  # the Node clients' packages (tests/clients/), not our code
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    found += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{alias.name}"
                              for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_it_finds_no_private_name_imported_from_another_module():
    assert private_imports() == []


# What only ctxkit.providers (wire formats) and ctxkit.agents (agents' habits) may name in code:
# string literals equal to an API's name, path or header, or holding an agent's own texts.
WIRE_NAMES = frozenset({"anthropic.messages", "openai.chat", "openai.responses", "openai.responses.resumed",
                        "/v1/messages", "/v1/chat/completions", "/v1/responses", "/chat/completions", "/responses",
                        "anthropic-version", "previous_response_id", "x-claude-code-session-id",
                        "gemini.generate", "gemini.stream", "x-goog-api-key", "x-gemini-api-privileged-user-id",
                        "generateContent", "streamGenerateContent", "usageMetadata"})
AGENT_TEXTS = ("This session is being continued", "<system-reminder>", "mcp__", "AGENTS.md instructions",
               "<command-name>", "<session_context>", "--- Context from")
SEAM = ("sdk/ctxkit/providers/", "sdk/ctxkit/agents/")
# record/usage.py takes provider names from its callers ("openai.chat" among the aliases) and reads
# every provider's usage (the one definition of usage); the
# demo plays a provider (its stand-in answers /v1/messages).
SEAM_EXEMPT = ("sdk/ctxkit/record/usage.py", "manifests/demo/")


def seam_breaches() -> list[str]:
    found = []
    for top in ("sdk/ctxkit", "manifests", "ctxview"):
        for path in sorted((ROOT / top).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith(SEAM + SEAM_EXEMPT) or "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                          if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                          and node.body and isinstance(node.body[0], ast.Expr)
                          and isinstance(node.body[0].value, ast.Constant)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                        and (node.value in WIRE_NAMES or any(t in node.value for t in AGENT_TEXTS)):
                    found.append(f"{name}:{node.lineno} {node.value[:60]!r}")
    return found


def test_it_finds_wire_formats_and_agent_habits_only_in_providers_and_agents():
    assert seam_breaches() == []
    assert any("anthropic.messages" in (ROOT / s / "anthropic.py").read_text(encoding="utf-8")
               for s in SEAM[:1]), "the walk looks for what the providers name"


def test_it_names_every_module_of_ctxkit_in_the_readme():
    named = named_in(layout_section())
    sdk = ROOT / "sdk" / "ctxkit"
    missing = [path.relative_to(sdk).as_posix() for path in sorted(sdk.rglob("*.py"))
               if not path.stem.startswith("_") and path.stem not in named]
    missing += [path.relative_to(sdk).as_posix() + "/" for path in sorted(sdk.rglob("*"))
                if path.is_dir() and (path / "__init__.py").exists() and path.name not in named]
    assert missing == []


def _names_markup(text: str) -> bool:
    """Whether a string holds a tag's start (``<td``, ``</tr``)."""
    return any(text[n + 1:n + 2].isalpha() or text[n + 1:n + 2] == "/" for n, c in enumerate(text) if c == "<")


def html_readers() -> list[str]:
    """Regular expressions over markup (a pattern with a tag in it) and HTML parsers in the tests
    other than tests/html_page.py."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if "node_modules" in path.parts or path.name == "html_page.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re":
                texts = [c.value for c in ast.walk(node.args[0]) if isinstance(c, ast.Constant)]
                if any(isinstance(t, str) and _names_markup(t) for t in texts):
                    found.append(f"{where} re.{node.func.attr} over markup")
            elif isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("HTMLParser") for b in node.bases):
                found.append(f"{where} an HTML parser of its own")
    return found


def test_it_reads_pages_in_the_tests_with_html_page_only():
    assert html_readers() == []
    assert _names_markup(r"<td[^>]*>(.*?)</td>") and not _names_markup(r"\d+ < \d+"), "the walk knows a tag"
