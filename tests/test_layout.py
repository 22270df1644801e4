"""The package shows its programs, and imports only go down (issue 31, item 3).

    mailroom/            the shared core: exitcodes, logs, metrics, backoff, queries, signing, net, formatting
    mailroom/client/     what an application imports: the cache and the rate limiter
    mailroom/send/       the runner (mailroom run)
    mailroom/inbound/    the bounce domain's server and what it parses
    mailroom/web/        the console, unsubscribe and webhook apps
    mailroom/submit/     the SMTP submission server (mailroom submit; its logins use the console's password hashing)
    mailroom/dev/        the embedded cluster, the sink, the demo
    mailroom/cli/        every command: the one place that wires the others together

A module may import its own layer and the layers before it in that list,
never one after it; the client helpers import the core alone. Read from the
source (every import statement, also those inside functions), so an import
that only runs on one path counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mailroom

PACKAGE = Path(mailroom.__file__).parent
LAYERS = ["core", "client", "send", "inbound", "web", "submit", "dev", "cli"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> str:
    if module == "mailroom.__main__":
        return "cli"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mailroom")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mailroom"):
            # `from mailroom.send import verp` imports the module mailroom.send.verp
            found |= {f"{node.module}.{a.name}" if (PACKAGE.parent / node.module.replace(".", "/") / a.name).exists()
                      or (PACKAGE.parent / f"{node.module.replace('.', '/')}/{a.name}.py").exists()
                      else node.module for a in node.names}
    return found


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_sits_in_a_layer_folder_or_the_core():
    top_level = {p.stem for p in PACKAGE.glob("*.py")}
    assert top_level == {"__init__", "__main__", "exitcodes", "logs", "metrics", "backoff", "queries", "signing",
                         "net", "formatting"}, "a new top-level module: put it in the folder of its program"
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(LAYERS[1:])


def test_imports_only_go_down():
    wrong = []
    for module, path in _modules().items():
        mine = LAYERS.index(_layer(module))
        for imported in _imports(path):
            theirs = LAYERS.index(_layer(imported))
            if theirs > mine or (_layer(module) == "client" and _layer(imported) not in ("core", "client")):
                wrong.append(f"{module} ({_layer(module)}) imports {imported} ({_layer(imported)})")
    assert wrong == []


def test_the_layering_check_sees_an_upward_import(tmp_path):
    """The check itself: an import inside a function, from a lower layer to a higher one, is found."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from mailroom.dev.sink import Sink\n    from mailroom.send import verp\n")
    assert _imports(probe) == {"mailroom.dev.sink", "mailroom.send.verp"}
    assert LAYERS.index(_layer("mailroom.dev.sink")) > LAYERS.index(_layer("mailroom.send.runner"))


def test_the_commands_are_wired_in_cli_alone():
    """click commands are declared in mailroom/cli/ and nowhere else."""
    declaring = sorted(module for module, path in _modules().items()
                       if _layer(module) != "cli" and ("@click.command" in path.read_text()
                                                       or "@click.group" in path.read_text()))
    assert declaring == []
