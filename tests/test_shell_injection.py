"""No config value reaches a shell unquoted (issue 9, part 1), tested on the real Snakemake.

Every free-string field of ``workflow/schemas/config.schema.yaml`` (found by walking the schema,
so a new field is covered without touching this file) gets a shell payload that would create a
marker file ``PWNED-<field>-<n>`` if any part of it were run by a shell. For each field the test
uses the first payload the schema accepts: a general one (``$( )``, backticks, ``;``, quotes,
pipes, ``&``, a newline), then URL-shaped ones for URL fields (``;``, ``&``, brace expansion).
A field whose schema accepts none of them is protected by the schema; the test checks that the
schema refuses the payload with the field's dotted name.

Fields a path must exist for (the model directory, the dump, GloVe, the coreference corpus, the
treebank files, the results and resources folders) get real files in folders whose names are the
payload. Then the real ``snakemake`` runs, for real, with ``--printshellcmds``:

* group A: the silver-tree tiny configuration, the whole DAG (every rule; the manifest's
  ``--config-json`` carries every field);
* group B: downloads from a local HTTP server (Wikipedia with a sha1sums list, GloVe, the UD
  treebank), ``--until`` the download and treebank rules;
* group C: a local treebank (``treebank.local``), ``--until treebank``.

Checks: no marker file exists anywhere, and every field whose payload the schema accepted reached
at least one executed shell command (so the test cannot pass by never running the payload).
"""

from __future__ import annotations

import hashlib
import http.server
import re
import shutil
import zipfile
from pathlib import Path

import pytest
import yaml

from bertlook.pipeline.config import resolve_data_path, schema_path, validate_config
from bertlook.errors import BertlookError
from local_http import local_http_server
from workflow_helpers import GENSIM_DUMP, ROOT, snakemake, tiny_config, without_contributions

# several full runs of the tiny DAG (minutes): `make test-all` and CI run it, `make test` does not
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCHEMA = yaml.safe_load(schema_path().read_text(encoding="utf-8"))
MARK = "PWNED"

# Fields whose rule only runs in another setup (see the module docstring); everything else is group A.
GROUP_B = {("wikipedia", "url"), ("wikipedia", "sha1sums_url"), ("wikipedia", "sha256"),
           ("glove", "url"), ("glove", "sha256")}
GROUP_C_PREFIX = ("treebank", "local")
GROUP_B_PREFIX = ("treebank", "ud")


def string_fields(schema: dict, path: tuple = ()):
    """Dotted paths (tuples; array items as index 0) of every free-string leaf of the schema."""
    types = schema.get("type")
    types = {types} if isinstance(types, str) else set(types or [])
    for alt in schema.get("oneOf", []) + schema.get("anyOf", []):
        yield from string_fields(alt, path)
    for key, sub in schema.get("properties", {}).items():
        yield from string_fields(sub, path + (key,))
    if "array" in types and isinstance(schema.get("items"), dict):
        yield from string_fields(schema["items"], path + (0,))
    if "string" in types and "enum" not in schema and "const" not in schema:
        yield path


FIELDS = sorted(set(string_fields(SCHEMA)), key=str)


def fid(path: tuple) -> str:
    """Short marker code of a field (file names stay under 255 bytes): f00, f01, ..."""
    return f"f{FIELDS.index(path):02d}"


def dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def group_of(path: tuple) -> str:
    if path in GROUP_B or path[:2] == GROUP_B_PREFIX:
        return "B"
    if path[:2] == GROUP_C_PREFIX or path[:1] == ("treebanks",):
        return "C"
    return "A"


def general_payload(path: tuple, newline: bool = True) -> str:
    m = f"{MARK}-{fid(path)}"
    text = (f"v $(touch {m}-1) `touch {m}-2` ;touch {m}-3; '$(touch {m}-4)' \"$(touch {m}-5)\" "
            f"|touch {m}-6| &touch {m}-7&")
    return text + (f"\ntouch {m}-8\n" if newline else "")


def url_payloads(path: tuple, base: str) -> list[str]:
    m = f"{MARK}-{fid(path)}"
    route = {"sha1sums_url": "sha1sums", "base_url": "ud"}.get(path[-1], path[0])
    tail = "/{repo}/{release}/{file}" if path[-1] == "base_url" else "/file.bin"
    return [
        f"{base}/{route}/$(touch {m}-u1)/`touch {m}-u2`/x;touch {m}-u3;{tail}",
        f"{base}/{route}/a;{{touch,{m}-u4}};b&{{touch,{m}-u5}}&${{IFS}}{tail}",
        f"{base}/{route}/a;{{touch,{m}-u4}};b&{{touch,{m}-u5}}&{tail}",
        f"{base}/{route}/a;b&c=touch&d=`{tail}",
    ]


def get(config: dict, path: tuple):
    node = config
    for key in path:
        node = node[key]
    return node


def _set(node, key, value) -> None:
    if isinstance(node, list):
        while len(node) <= key:
            node.append(None)
    node[key] = value


def put(config: dict, path: tuple, value) -> None:
    """Set ``config[path]``, making the lists/mappings on the way (``example_heads: auto`` -> [..])."""
    node = config
    for key, nxt in zip(path[:-1], path[1:]):
        present = key in node if isinstance(node, dict) else key < len(node)
        child = node[key] if present else None
        if not isinstance(child, list if isinstance(nxt, int) else dict):
            child = [] if isinstance(nxt, int) else {}
            _set(node, key, child)
        node = child
    _set(node, path[-1], value)


def accepted(config: dict, path: tuple, value) -> bool:
    trial = yaml.safe_load(yaml.safe_dump(config))
    put(trial, path, value)
    try:
        validate_config(trial)
        return True
    except BertlookError:
        return False


def payload_folder(workdir: Path, path: tuple) -> Path:
    folder = workdir / general_payload(path, newline=False)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def tiny_glove(words: list[str], dim: int = 50) -> str:
    return "".join(f"{w} " + " ".join(f"{((i * 7 + j) % 13) / 13 - 0.5:.3f}" for j in range(dim)) + "\n"
                   for i, w in enumerate(words))


def conllu_sentences(n: int) -> str:
    """A small CoNLL-U file: ``n`` copies of two hand-made sentences with distinct ids."""
    rows = [("The", "DT", 2, "det"), ("cat", "NN", 3, "nsubj"), ("saw", "VBD", 0, "root"),
            ("the", "DT", 5, "det"), ("dog", "NN", 3, "obj"), ("in", "IN", 8, "case"),
            ("the", "DT", 8, "det"), ("park", "NN", 3, "obl"), (".", ".", 3, "punct")]
    out = []
    for k in range(n):
        out.append(f"# sent_id = s{k}\n# text = x\n")
        out += [f"{i}\t{w}\t{w.lower()}\tX\t{x}\t_\t{h}\t{r}\t_\t_\n" for i, (w, x, h, r) in enumerate(rows, 1)]
        out.append("\n")
    return "".join(out)


def printed_commands(proc) -> str:
    return proc.stdout + proc.stderr


MARKER_FILE = re.compile(rf"^{MARK}-f[0-9]+-u?[0-9]$")


def check_no_payload_ran(*roots: Path) -> None:
    """No marker file (exactly ``PWNED-<field>-<n>``, what a payload's ``touch`` makes) anywhere."""
    ran = [str(p) for root in roots for p in root.rglob(f"{MARK}-*") if MARKER_FILE.match(p.name)]
    assert not ran, f"shell payloads ran: {ran}"


# --------------------------------------------------------------------------------------------------

def test_the_schema_walk_finds_the_fields_we_know():
    paths = set(FIELDS)
    known = {("models", 0, "name_or_path"), ("models", 0, "revision"), ("wikipedia", "url"),
             ("wikipedia", "sha1sums_url"), ("glove", "member"), ("coref", "conll", 0),
             ("results_dir",), ("treebank", "ud", "base_url"), ("treebank", "local", "dev")}
    assert known <= paths, known - paths
    assert len(paths) >= 20


@pytest.fixture(scope="module")
def injection_runs(tmp_path_factory, tiny_bert_dir, fixtures_dir):
    """Run groups A, B, C; return {field: (group, status, shell output)}."""
    dump = resolve_data_path(GENSIM_DUMP)
    dump_bytes = dump.read_bytes()
    ud_text = conllu_sentences(12).encode()
    results = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server API
            path = self.path
            if "/sha1sums/" in path:
                body = self.server.sums
            elif "/wikipedia/" in path:
                body = dump_bytes
            elif "/glove/" in path:
                body = b"the 0.1 0.2\n"
            else:
                body = ud_text
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with local_http_server(tmp_path_factory.mktemp("www"), Handler) as srv:
        for group in ("A", "B", "C"):
            workdir = tmp_path_factory.mktemp(f"inject{group}")
            config = without_contributions(tiny_config(workdir, tiny_bert_dir))
            config["segments"]["n_segments"] = 6
            config["treebank"]["silver"].update(train_sentences=12, dev_sentences=8)
            config["probes"].update(seeds=[0], random_init=False)
            config["heads"]["bootstrap"] = 10
            config["gradients"]["max_examples"] = 2
            if group == "B":
                dump_name = "enwiki-pages-articles1.xml.bz2"
                config["wikipedia"].update(path=None, url=f"{srv.base}/wikipedia/{dump_name}")
                config["glove"].update(path=None, url=f"{srv.base}/glove/glove.zip")
                config["treebank"]["source"] = "ud"
                config["treebank"]["ud"] = {"base_url": srv.base + "/ud/{repo}/{release}/{file}"}
            if group == "C":
                config["treebank"]["source"] = "local"
                local = workdir / "local"
                local.mkdir()
                (local / "train.conllu").write_text(conllu_sentences(12))
                (local / "dev.conllu").write_text(conllu_sentences(6))
                config["treebank"]["local"] = {"train": str(local / "train.conllu"),
                                               "dev": str(local / "dev.conllu"), "kind": "ud"}
                # a `treebanks` entry (issue 13): its files reach the treebank job of its own run
                config["treebanks"] = [{"label": "second", "language": "de", "source": "local",
                                        "local": dict(config["treebank"]["local"])}]
            planted = {}
            for path in sorted(FIELDS, key=lambda p: p == ("glove", "member")):  # member after path
                if group_of(path) != group:
                    continue
                value = _plant(path, config, workdir, tiny_bert_dir, fixtures_dir, dump, srv.base)
                if value is None:
                    planted[path] = "protected"
                    continue
                put(config, path, value)
                planted[path] = value
            validate_config(config)  # every planted payload together still validates
            if group == "B":
                url = config["wikipedia"]["url"]
                name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                srv.sums = f"{hashlib.sha1(dump_bytes).hexdigest()}  {name}\n".encode()
            (workdir / "config.yaml").write_text(yaml.safe_dump(config))
            until = {"A": [], "B": ["--until", "download_wikipedia", "download_glove", "treebank"],
                     "C": ["--until", "treebank"]}[group]
            proc = snakemake(workdir, "--printshellcmds", "--keep-going", *until)
            check_no_payload_ran(workdir, ROOT)
            shown = printed_commands(proc)
            for path, value in planted.items():
                results[path] = (group, value, shown, proc.returncode)
            if group == "A":
                assert proc.returncode == 0, shown[-4000:]
    return results


def _plant(path, config, workdir, tiny_bert_dir, fixtures_dir, dump, base):
    """The payload value for ``path`` (making the file it must name), or None if the schema
    refuses every candidate."""
    folder = lambda: payload_folder(workdir, path)  # noqa: E731
    if path == ("models", 0, "name_or_path"):
        target = folder() / "model"
        shutil.copytree(tiny_bert_dir, target)
    elif path == ("wikipedia", "path"):
        target = folder() / "dump.xml.bz2"
        shutil.copyfile(dump, target)
    elif path == ("glove", "path"):
        target = folder() / "glove.zip"
        member = config["glove"].get("member") or "glove.txt"
        member_path = ("glove", "member")
        if accepted(config, member_path, general_payload(member_path, newline=False)):
            member = general_payload(member_path, newline=False)
            config["glove"]["member"] = member
        with zipfile.ZipFile(target, "w") as zf:
            zf.writestr(member, tiny_glove(["the", "a", "of", "and", "in", "is", "was", "to", "."]))
    elif path == ("glove", "member"):  # planted inside the zip of glove.path, when the schema allows it
        planted = general_payload(path, newline=False)
        return planted if config["glove"]["member"] == planted else None
    elif path == ("coref", "conll", 0):
        target = folder() / "coref.gold_conll"
        shutil.copyfile(fixtures_dir / "tiny_coref.gold_conll", target)
    elif (path[:2] == GROUP_C_PREFIX or path[:3] == ("treebanks", 0, "local")) and path[-1] in ("train", "dev"):
        target = folder() / f"{path[-1]}.conllu"
        shutil.copyfile(get(config, path), target)
    elif path in {("results_dir",), ("resources_dir",)}:
        target = folder() / path[0]
    else:
        candidates = [general_payload(path), general_payload(path, newline=False)]
        if "url" in str(path[-1]):
            candidates = url_payloads(path, base) + candidates
        return next((c for c in candidates if accepted(config, path, c)), None)
    return str(target) if accepted(config, path, str(target)) else None


@pytest.mark.parametrize("path", FIELDS, ids=[dotted(p) for p in FIELDS])
def test_no_payload_runs_and_every_accepted_payload_reached_a_shell(injection_runs, path):
    if path not in injection_runs:
        pytest.fail(f"{dotted(path)}: not planted in any group")
    group, value, shown, _rc = injection_runs[path]
    if value == "protected":
        # the schema refuses every payload: check it says so with the field's dotted name
        trial = validate_config(yaml.safe_load((ROOT / "config" / "offline.yaml").read_text()))
        put(trial, path, general_payload(path))
        named = path[:-1] if isinstance(path[-1], int) else path  # a oneOf's error names the list
        with pytest.raises(BertlookError, match=re.escape(dotted(named))):
            validate_config(trial)
        return
    assert f"{MARK}-{fid(path)}" in shown, (
        f"{dotted(path)} (group {group}, marker {fid(path)}): its payload reached no executed shell command; "
        "assign the field to the group whose rules use it (see the module docstring)")
