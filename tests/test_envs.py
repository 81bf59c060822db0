"""The conda envs (envs/*.yaml, `snakemake --sdm conda`) hold what each rule's step imports.

Every rule runs one step, `python -m bertlook STEP ...` (workflow/rules/rule_helpers.smk: bertlook_cmd), in
the env of its `conda:` directive (ENV_TORCH or ENV_ANALYSIS). The env's Python finds bertlook itself
through PYTHONPATH (the checkout's src/), so the env must provide bertlook's third-party imports, and
only those the step reaches matter: bertlook imports its heavy libraries inside functions.

What a step imports is collected statically (`ast`, no import of the libraries):

* parse time: `bertlook.__main__`, `bertlook.cli` and the step's own CLI module's import-time code and
  `register_cli` (the lazy registry `cli.COMMANDS`: `bertlook STEP` imports only STEP's module);
* the step's handler (the `func` its sub-parser sets), with its `if args.X ...` branches decided by the
  flags the rule passes (a flag the rule does not pass has the parser's default; an undecidable test
  keeps both branches), e.g. `gradients --partial` (reduce, ENV_ANALYSIS) never reaches the model code
  that `gradients --out-partial` (ENV_TORCH) runs;
* transitively, every bertlook function, class or module those reach, and in them every import,
  including imports inside functions (conservative: all branches of every function below the handler).

An import is provided by an env when the distribution that installs it in this virtualenv
(importlib.metadata.packages_distributions) is listed in the env (conda names mapped to PyPI names).
Packages that the shipped configurations load by name (`package:MODULE` models, data and GloVe, the
spaCy model of silver trees) must be in the env of the rules that load them, too.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from workflow_helpers import ROOT

RULES_DIR = ROOT / "workflow" / "rules"
SRC = ROOT / "src"
PKG = "bertlook"
STDLIB = set(sys.stdlib_module_names) | {"__future__"}

# conda-forge package name -> the PyPI distribution it installs (when they differ)
CONDA_TO_PYPI = {"matplotlib-base": "matplotlib", "pytorch": "torch", "pytorch-cpu": "torch"}
# import name -> PyPI distribution, for modules not installed in this virtualenv
IMPORT_TO_PYPI = {"sklearn": "scikit-learn", "yaml": "pyyaml", "huggingface_hub": "huggingface-hub"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---- rules: env, step, flags ---------------------------------------------------------------------


@dataclass
class Rule:
    name: str
    env: Path
    step: str
    call: ast.Call  # the bertlook_cmd(...) expression


def _call_text(text: str, start: int) -> str:
    """The balanced ``bertlook_cmd(...)`` expression starting at ``start``."""
    depth = 0
    tokens = tokenize.generate_tokens(io.StringIO(text[start:]).readline)
    for tok in tokens:
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
            if depth == 0:
                lines = text[start:].splitlines(keepends=True)
                row, col = tok.end
                return "".join(lines[: row - 1]) + lines[row - 1][:col]
    raise AssertionError(f"unbalanced bertlook_cmd( at {start}")


def _command(block: str, where: str) -> tuple[str, ast.Call] | None:
    """(step, call) of a rule's command: ``bertlook_cmd(STEP, ...)``, or ``model_cmd`` / ``download_cmd``
    (workflow/rules/rule_helpers.smk) written out as the ``bertlook_cmd`` call they make; None without one."""
    m = re.search(r"\b(bertlook_cmd|model_cmd|download_cmd)\(", block)
    if not m:
        return None
    call = ast.parse(_call_text(block, m.start(1)), mode="eval").body
    if m.group(1) == "model_cmd":  # bertlook_cmd(step, model_flags, omp_threads=True, **flags)
        call = ast.Call(ast.Name("bertlook_cmd"), [call.args[0], ast.Name("model_flags"), *call.args[1:]],
                        [ast.keyword("omp_threads", ast.Constant(True)), *call.keywords])
    elif m.group(1) == "download_cmd":
        helpers = (RULES_DIR / "rule_helpers.smk").read_text()
        call = ast.parse(_call_text(helpers, helpers.index("bertlook_cmd(", helpers.index("def download_cmd"))),
                         mode="eval").body
    assert isinstance(call.args[0], ast.Constant), f"{where}: the step is not a constant"
    return call.args[0].value, call


@lru_cache(maxsize=None)
def workflow_rules() -> tuple[Rule, ...]:
    """Every rule of workflow/rules/*.smk (also those defined only for some configurations).

    ``use rule A as B [with: ...]`` makes B a copy of A: A's env, step and flags, except where the
    ``with:`` block sets its own ``conda:`` or ``params: cmd=...``. The templates of workflow/Snakefile
    (``_analysis_step`` ...: an env, no command) are bases only, not listed."""
    common = (RULES_DIR / "common.smk").read_text()
    envs = dict(re.findall(r'^(ENV_\w+) = "([^"]+)"', common, flags=re.M))
    assert envs, "no ENV_* constants in common.smk"
    rules: dict[str, Rule | None] = {}
    uses = []  # (where, base, name, block)
    for smk in [ROOT / "workflow" / "Snakefile", *sorted(RULES_DIR.glob("*.smk"))]:
        text = smk.read_text()
        starts = list(re.finditer(r"^[ \t]*(?:rule (\w+):|use rule (\w+) as (\w+)\b[^\n]*)", text, flags=re.M))
        for i, m in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
            block = text[m.start():end]
            name = m.group(1) or m.group(3)
            where = f"{smk.name}: rule {name}"
            if m.group(2):
                uses.append((where, m.group(2), name, block))
                continue
            if name == "all":
                continue
            conda = re.search(r"^\s*conda:\s*\n\s*(ENV_\w+)\s*$", block, flags=re.M)
            assert conda and conda.group(1) in envs, f"{where}: no conda: ENV_* directive"
            command = _command(block, where)
            assert command or name.startswith("_"), f"{where}: no bertlook_cmd(...) parameter"
            env = (RULES_DIR / envs[conda.group(1)]).resolve()
            rules[name] = Rule(name, env, *command) if command else Rule(name, env, None, None)
    while uses:  # a use rule may copy another use rule, in any file order
        ready = [u for u in uses if u[1] in rules]
        assert ready, "use rule of an unknown rule: " + ", ".join(f"{w} (from {b})" for w, b, _, _ in uses)
        for use in ready:
            uses.remove(use)
            where, base, name, block = use
            env, step, call = rules[base].env, rules[base].step, rules[base].call
            conda = re.search(r"^\s*conda:\s*\n\s*(ENV_\w+)\s*$", block, flags=re.M)
            if conda:
                assert conda.group(1) in envs, f"{where}: conda: {conda.group(1)} is not an ENV_* constant"
                env = (RULES_DIR / envs[conda.group(1)]).resolve()
            command = _command(block, where)
            if command:
                step, call = command
            assert step or name.startswith("_"), f"{where}: no bertlook_cmd(...) parameter"
            rules[name] = Rule(name, env, step, call)
    return tuple(rule for name, rule in rules.items() if not name.startswith("_"))


# ---- envs ---------------------------------------------------------------------------------------


def env_packages(path: Path) -> dict[str, str | None]:
    """Normalised PyPI name -> pinned version (None when unpinned) of every package of a conda env."""
    out: dict[str, str | None] = {}

    def add(spec: str, sep: str) -> None:
        name, _, version = spec.partition(sep)
        name = normalise(name.strip())
        out[CONDA_TO_PYPI.get(name, name)] = version.strip() or None

    for dep in yaml.safe_load(path.read_text())["dependencies"]:
        if isinstance(dep, dict):
            for spec in dep.get("pip", []):
                add(spec, "==")
        else:
            add(dep, "=")
    return out


@lru_cache(maxsize=None)
def _distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def distribution_of(module: str) -> str:
    dists = _distributions().get(module)
    if dists:
        return normalise(dists[0])
    return normalise(IMPORT_TO_PYPI.get(module, module))


# ---- static import graph of src/bertlook ----------------------------------------------------------


def _type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_time_nodes(tree: ast.Module) -> list[ast.AST]:
    """Every node that runs when the module is imported: not function bodies, not TYPE_CHECKING."""
    out: list[ast.AST] = []

    def visit(stmts):
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in stmt.decorator_list + stmt.args.defaults + [d for d in stmt.args.kw_defaults if d]:
                    out.extend(ast.walk(sub))
            elif isinstance(stmt, ast.ClassDef):
                for sub in stmt.decorator_list + stmt.bases:
                    out.extend(ast.walk(sub))
                visit(stmt.body)
            elif isinstance(stmt, ast.If) and _type_checking(stmt.test):
                visit(stmt.orelse)
            elif isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for name in ("test", "iter", "target"):
                    if isinstance(getattr(stmt, name, None), ast.AST):
                        out.extend(ast.walk(getattr(stmt, name)))
                for item in getattr(stmt, "items", []):
                    out.extend(ast.walk(item))
                for name in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, name, []))
                for handler in getattr(stmt, "handlers", []):
                    if handler.type is not None:
                        out.extend(ast.walk(handler.type))
                    visit(handler.body)
            else:
                out.extend(ast.walk(stmt))

    visit(tree.body)
    return out


def _absolute(node: ast.ImportFrom, module: str) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join(base + ([node.module] if node.module else []))


def _bindings(node: ast.Import | ast.ImportFrom, module: str) -> dict[str, tuple]:
    """Names an import binds: name -> ("module", dotted) or ("attr", module, name)."""
    if isinstance(node, ast.Import):
        return {(a.asname or a.name.split(".")[0]): ("module", a.name if a.asname else a.name.split(".")[0])
                for a in node.names}
    base = _absolute(node, module)
    return {(a.asname or a.name): ("attr", base, a.name) for a in node.names}


class ImportGraph:
    """Units of code (a module's import-time code "bertlook.x", a top-level function or class
    "bertlook.x:name") and what reaching them imports."""

    def __init__(self, src: Path = SRC):
        self.trees: dict[str, ast.Module] = {}
        for path in sorted((src / PKG).rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts  # ("bertlook", "attention", "store")
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.trees[name] = ast.parse(path.read_text(), filename=str(path))
        self.defs = {m: {n.name: n for n in t.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                       ast.ClassDef))}
                     for m, t in self.trees.items()}
        self.module_bindings: dict[str, dict[str, tuple]] = {}
        for m, tree in self.trees.items():
            bound: dict[str, tuple] = {}
            for node in _import_time_nodes(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    bound.update(_bindings(node, m))
            self.module_bindings[m] = bound

    def resolve_binding(self, binding: tuple):
        if binding[0] == "module":
            return ("module", binding[1]) if binding[1] in self.trees else None
        _, module, name = binding
        if module in self.trees:
            return self.resolve_attr(module, name)
        return None

    def resolve_attr(self, module: str, name: str):
        if f"{module}.{name}" in self.trees:
            return ("module", f"{module}.{name}")
        if name in self.defs.get(module, {}):
            return ("unit", f"{module}:{name}")
        if name in self.module_bindings.get(module, {}):
            return self.resolve_binding(self.module_bindings[module][name])
        return None

    def resolve_ref(self, ref: ast.AST, module: str, local: dict[str, tuple]):
        chain = []
        while isinstance(ref, ast.Attribute):
            chain.append(ref.attr)
            ref = ref.value
        if not isinstance(ref, ast.Name):
            return None
        name = ref.id
        if name in local:
            target = self.resolve_binding(local[name])
        elif name in self.defs[module]:
            target = ("unit", f"{module}:{name}")
        elif name in self.module_bindings[module]:
            target = self.resolve_binding(self.module_bindings[module][name])
        else:
            return None
        for attr in reversed(chain):
            if target is None or target[0] != "module":
                break
            target = self.resolve_attr(target[1], attr)
        return target

    def unit(self, key: str) -> tuple[str, list[ast.AST], bool]:
        """(module, nodes, calls_only) of a unit. Import-time code and `register_cli` (run when the
        parser is built) follow calls only: the handlers register_cli names are not run then."""
        if ":" not in key:
            return key, _import_time_nodes(self.trees[key]), True
        module, name = key.split(":", 1)
        return module, list(ast.walk(self.defs[module][name])), name == "register_cli"

    def reach(self, roots: list[str], extra: list[tuple[str, list[ast.AST]]] = ()) -> set[str]:
        """Top-level names of the non-bertlook modules imported by the code reachable from ``roots``
        (unit keys) and ``extra`` ((module, nodes) walked as a function body)."""
        seen: set[str] = set()
        imported: set[str] = set()
        todo: list = [*roots, *extra]
        while todo:
            item = todo.pop()
            if isinstance(item, tuple):
                (module, nodes), calls_only = item, False
            else:
                if item in seen:
                    continue
                seen.add(item)
                module, nodes, calls_only = self.unit(item)
            local: dict[str, tuple] = {}
            for node in nodes:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    local.update(_bindings(node, module))
                    if isinstance(node, ast.Import):
                        names = [a.name for a in node.names]
                    else:
                        base = _absolute(node, module)
                        names = [base] + [f"{base}.{a.name}" for a in node.names]
                    for dotted in names:
                        parts = dotted.split(".")
                        if parts[0] != PKG:
                            imported.add(parts[0])
                        todo.extend(".".join(parts[:i]) for i in range(1, len(parts) + 1)
                                    if ".".join(parts[:i]) in self.trees)
            for node in nodes:
                refs = []
                if calls_only and isinstance(node, ast.Call):
                    refs = [node.func] + [k.value for k in node.keywords if k.arg == "type"]
                elif not calls_only and isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                    refs = [node]
                for ref in refs:
                    target = self.resolve_ref(ref, module, local)
                    if target:
                        todo.append(target[1])
        return imported - STDLIB


# ---- the handler's branches under a rule's flags ---------------------------------------------------

UNKNOWN = object()


def _flag_values(rule: Rule, parser) -> tuple[dict, bool]:
    """(dest -> value or UNKNOWN, whether flags not named may be set) of a rule's command line."""
    values = {}
    for kw in rule.call.keywords:
        if kw.arg in (None, "omp_threads"):  # None: **flags, named below
            continue
        value = kw.value
        if isinstance(value, ast.Constant):
            values[kw.arg] = parser.get_default(kw.arg) if value.value in (None, False) else value.value
        elif isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id in ("IN", "OUT", "WC"):
            values[kw.arg] = f"<{value.value.id}.{value.attr}>"  # a path or wildcard: a non-empty string
        else:
            values[kw.arg] = UNKNOWN
    # flag groups (model_flags, ...) and **flags add flags not named here
    return values, len(rule.call.args) > 1 or any(kw.arg is None for kw in rule.call.keywords)


def _decide(test: ast.AST, args_name: str, values: dict, open_ended: bool, parser):
    """True / False / UNKNOWN for a branch test on ``args``."""

    def value(node):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == args_name:
            if node.attr in values:
                return values[node.attr]
            return UNKNOWN if open_ended else parser.get_default(node.attr)
        if isinstance(node, ast.Constant):
            return node.value
        return UNKNOWN

    if isinstance(test, ast.BoolOp):
        parts = [_decide(v, args_name, values, open_ended, parser) for v in test.values]
        stop = isinstance(test.op, ast.Or)  # or: True decides, and: False decides
        if stop in parts:
            return stop
        return UNKNOWN if UNKNOWN in parts else (not stop)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _decide(test.operand, args_name, values, open_ended, parser)
        return UNKNOWN if inner is UNKNOWN else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
        left, right = value(test.left), value(test.comparators[0])
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        return (left is right) == isinstance(test.ops[0], ast.Is)
    v = value(test)
    return UNKNOWN if v is UNKNOWN else bool(v)


def _ends(stmts) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise))


def handler_nodes(func: ast.FunctionDef, rule: Rule, parser) -> list[ast.AST]:
    """Nodes of a handler that run under the rule's flags (if-branches decided where possible)."""
    args_name = func.args.args[0].arg
    values, open_ended = _flag_values(rule, parser)
    out: list[ast.AST] = []

    def walk(stmts) -> bool:  # True: this statement list certainly returns / raises
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                taken = _decide(stmt.test, args_name, values, open_ended, parser)
                out.extend(ast.walk(stmt.test))
                if taken is True:
                    if walk(stmt.body):
                        return True
                elif taken is False:
                    if walk(stmt.orelse):
                        return True
                else:
                    ends_body, ends_else = walk(stmt.body), walk(stmt.orelse)
                    if ends_body and ends_else:
                        return True
            else:
                out.extend(ast.walk(stmt))
                if isinstance(stmt, (ast.Return, ast.Raise)):
                    return True
        return False

    walk(func.body)
    return out


# ---- the checks ---------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def import_graph() -> ImportGraph:
    return ImportGraph()


@lru_cache(maxsize=None)
def _cli():
    from bertlook import cli

    parser = cli.build_parser(full=True)  # every step module registered, not stubs
    steps = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    return cli.COMMAND_MODULES, steps


PARSE_ROOTS = ["bertlook.__main__", "bertlook.cli", "bertlook.cli:main", "bertlook.cli:build_parser"]


def _step_module(step: str) -> str:
    from bertlook import cli

    return cli.COMMANDS[step][0]


def step_imports(rule: Rule, graph: ImportGraph) -> set[str]:
    modules, steps = _cli()
    assert rule.step in steps, f"rule {rule.name}: `bertlook {rule.step}` is not a subcommand"
    parser = steps[rule.step]
    handler = parser.get_default("func")
    module, name = handler.__module__, handler.__qualname__
    step_module = _step_module(rule.step)
    roots = [*PARSE_ROOTS, step_module, f"{step_module}:register_cli"]
    func = graph.defs[module][name]
    return graph.reach(roots, extra=[(module, handler_nodes(func, rule, parser))])


def test_rules_are_parsed():
    rules = {r.name: r for r in workflow_rules()}
    assert {"segments", "extract_segments", "gradients_shard", "gradients", "figures", "heads", "probes",
            "coref_extract", "download_wikipedia", "manifest"} <= set(rules)
    assert rules["gradients"].step == "gradients" and rules["extract_segments"].step == "extract-segments"
    assert {r.env.name for r in rules.values()} == {"torch.yaml", "analysis.yaml"}
    # use rule merge_words as merge_words_random: the copy runs the same step in the same env
    assert rules["merge_words_random"].step == rules["merge_words"].step == "merge-stores"
    assert rules["merge_words_random"].env == rules["merge_words"].env
    # the random-init maps come from the extract_words job itself (--random-init-out): no rule of their own
    assert "extract_words_random" not in rules and rules["extract_words"].step == "extract-words"


def test_the_import_graph_sees_lazy_imports_and_branches():
    """Self-check of the analysis on code whose imports are known."""
    graph = import_graph()
    rules = {r.name: r for r in workflow_rules()}
    shard, reduce = step_imports(rules["gradients_shard"], graph), step_imports(rules["gradients"], graph)
    assert {"torch", "transformers"} <= shard and not {"matplotlib", "seaborn"} & shard  # --out-partial
    assert {"matplotlib", "seaborn", "pandas"} <= reduce and "torch" not in reduce    # --partial
    assert {"torch", "tqdm"} <= step_imports(rules["extract_segments"], graph)
    assert "yaml" in graph.reach(["bertlook.pipeline.config"]) and "numpy" in graph.reach(["bertlook.attention.store"])


def _first_step_of_each_module() -> list[str]:
    from bertlook import cli

    return list({module: step for step, (module, _) in reversed(cli.COMMANDS.items())}.values())


@pytest.mark.parametrize("step", _first_step_of_each_module())
def test_parse_time_imports_match_a_real_import(step):
    """The static parse-time set of a step (what it imports before its handler runs) is what
    cli.build_parser(step) really imports (in a fresh interpreter): every package of the static set is
    imported, and nothing beyond it (the static packages are imported first, so what they pull in
    themselves, e.g. pandas' dateutil, is not counted)."""
    import subprocess

    module = _step_module(step)
    static = import_graph().reach([*PARSE_ROOTS, module, f"{module}:register_cli"])
    code = (f"import importlib, sys; base = set(sys.modules); "
            f"[importlib.import_module(m) for m in {sorted(static)!r}]; deps = set(sys.modules); "
            f"from bertlook import cli; cli.build_parser({step!r}); "
            "top = lambda ms: ' '.join(sorted({m.split('.')[0] for m in ms})); "
            "print(top(set(sys.modules) - deps)); print(top(set(sys.modules) - base))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    beyond, everything = (set(line.split()) - STDLIB - {PKG, "_distutils_hack", "__main__"}
                          for line in proc.stdout.split("\n")[:2])
    assert beyond == set(), f"bertlook {step} imports {beyond} at parse time, which the static analysis misses"
    assert static <= everything


@pytest.mark.parametrize("rule", workflow_rules(), ids=lambda r: r.name)
def test_rule_env_provides_its_step_imports(rule):
    provided = env_packages(rule.env)
    needed = step_imports(rule, import_graph())
    missing = sorted(f"{m} ({distribution_of(m)})" for m in needed if distribution_of(m) not in provided)
    assert not missing, (f"rule {rule.name} runs `bertlook {rule.step}` in envs/{rule.env.name}, which lacks "
                         f"{', '.join(missing)}")


def _config_packages(config: dict) -> list[tuple[str, set[str]]]:
    """(import name, rules that load it by name) of a shipped configuration's package: values."""
    out = []
    for model in config["models"]:
        if model["name_or_path"].startswith("package:"):
            model_rules = {r.name for r in workflow_rules()
                           if any(isinstance(a, ast.Name) and a.id == "model_flags" for a in r.call.args[1:])}
            out.append((model["name_or_path"][len("package:"):], model_rules))
    for key, rules in (("wikipedia", {"segments", "treebank"}), ("glove", {"probes", "probes_random"})):
        path = config[key].get("path") or ""
        if path.startswith("package:"):
            out.append((path[len("package:"):].split("/")[0], rules))
    if config["treebank"]["source"] == "silver":
        out.append((config["treebank"]["silver"]["spacy_model"], {"treebank"}))
    return out


@pytest.mark.parametrize("configfile", ["config.yaml", "config/offline.yaml", ".test/config.yaml"])
def test_packages_a_config_names_are_in_the_env_of_their_rules(configfile):
    config = yaml.safe_load((ROOT / configfile).read_text())
    rules = {r.name: r for r in workflow_rules()}
    for module, names in _config_packages(config):
        for name in sorted(names & set(rules)):
            assert distribution_of(module) in env_packages(rules[name].env), (
                f"{configfile}: rule {name} loads package:{module} ({distribution_of(module)}), "
                f"not in envs/{rules[name].env.name}")


def test_env_versions_match_constraints():
    """The envs pin the versions of constraints.txt (the ones the tests and golden numbers used)."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[normalise(name)] = version.strip()
    for env in sorted((ROOT / "envs").glob("*.yaml")):
        for name, version in env_packages(env).items():
            if name in pins:
                assert version == pins[name], f"envs/{env.name}: {name} {version}, constraints.txt {pins[name]}"
