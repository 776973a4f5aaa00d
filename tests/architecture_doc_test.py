#!/usr/bin/env python3
"""docs/ARCHITECTURE.md says what the code does: its mesh and its "Adding a dimension" file list.

    python3 tests/architecture_doc_test.py --repo ROOT
    python3 tests/architecture_doc_test.py --self-test

Two marked tables of the document are statements that drift when the code changes, so they are
checked against the code rather than for existing names only:

  mesh-dims        the dimensions of the standard mesh, in order, are the names that
                   standard_dims() (common/comm/device_mesh.cpp) returns, outermost first
  dimension-files  the files a new dimension touches: each row's file exists and defines its
                   symbol at namespace scope (a definition, not a call or a declaration), and no
                   other source file of the repository defines that symbol (a table that
                   still names a file after the code moved fails)

Exit code 0: the document agrees with the code; 1: it does not (each disagreement printed);
2: bad arguments. --self-test runs the checks on a small made-up repository and expects a good
document to pass and each kind of stale statement to fail.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile

DOC = "docs/ARCHITECTURE.md"
SOURCE_DIRS = ("common", "ch01_fp_formats", "ch02_loss_scaling", "ch03_master_weights",
               "ch04_ddp", "ch05_zero", "ch06_tensor_parallel", "ch07_pipeline", "ch08_full_3d",
               "ch09_expert_parallel", "bench", "fuzz", "exercises")
SOURCE_EXT = (".cpp", ".cu", ".h", ".cuh")


def marked_rows(doc_text, marker):
    """The table rows between <!-- marker ... --> and <!-- /marker -->, as lists of cells
    (the header and the |---| line left out)."""
    m = re.search(r"<!--\s*%s\b[^>]*-->(.*?)<!--\s*/%s\s*-->" % (marker, marker), doc_text,
                  re.S)
    if not m:
        return None
    rows = []
    for line in m.group(1).splitlines():
        line = line.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        rows.append(cells)
    return rows[1:]  # the header


def unquote(cell):
    return cell.strip().strip("`").strip()


def standard_dims(repo):
    """The names standard_dims() returns, in order, read from its body."""
    path = os.path.join(repo, "common/comm/device_mesh.cpp")
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^std::vector<MeshDim>\s+standard_dims\([^)]*\)\s*\{(.*?)^\}", text, re.M | re.S)
    if not m:
        return None
    ret = re.search(r"return\s*\{(.*?)\};", m.group(1), re.S)
    if not ret:
        return None
    return re.findall(r"\{\s*\"(\w+)\"", ret.group(1))


def definition_pattern(symbol):
    # A definition at namespace scope: a line that starts with a type (not indented: not a
    # call inside a function), has the symbol before its parameter list, and opens a body on
    # that line or a later one before any ';' (a declaration ends in ';').
    return re.compile(r"^[A-Za-z_][\w:<>,&*\s]*?[\s&*]%s\s*\([^;{]*\)\s*(?:const\s*)?\{"
                      % re.escape(symbol), re.M)


def defining_files(repo, symbol):
    pat = definition_pattern(symbol)
    found = []
    for top in SOURCE_DIRS:
        for d, _dirs, files in os.walk(os.path.join(repo, top)):
            for f in files:
                if not f.endswith(SOURCE_EXT):
                    continue
                p = os.path.join(d, f)
                with open(p, encoding="utf-8", errors="replace") as fh:
                    if pat.search(fh.read()):
                        found.append(os.path.relpath(p, repo))
    return sorted(found)


def check(repo):
    problems = []
    doc_path = os.path.join(repo, DOC)
    try:
        doc = open(doc_path, encoding="utf-8").read()
    except OSError as e:
        return ["%s: cannot read (%s)" % (DOC, e.strerror)]

    dims_rows = marked_rows(doc, "mesh-dims")
    code_dims = standard_dims(repo)
    if dims_rows is None:
        problems.append("%s: no <!-- mesh-dims --> table" % DOC)
    elif code_dims is None:
        problems.append("common/comm/device_mesh.cpp: standard_dims() not found")
    else:
        doc_dims = [unquote(r[0]) for r in dims_rows]
        if doc_dims != code_dims:
            problems.append("%s: the mesh's dimensions are %s, but standard_dims() returns %s"
                            % (DOC, doc_dims, code_dims))
        for r in dims_rows:
            if len(r) < 2 or unquote(r[1]) != "--" + unquote(r[0]):
                problems.append("%s: dimension %s: its flag should be --%s"
                                % (DOC, unquote(r[0]), unquote(r[0])))

    file_rows = marked_rows(doc, "dimension-files")
    if file_rows is None:
        problems.append("%s: no <!-- dimension-files --> table" % DOC)
        return problems
    if not file_rows:
        problems.append("%s: the dimension-files table is empty" % DOC)
    for r in file_rows:
        if len(r) < 3:
            problems.append("%s: dimension-files row %r needs file | symbol | what" % (DOC, r))
            continue
        path, symbol = unquote(r[0]), unquote(r[1])
        if not os.path.isfile(os.path.join(repo, path)):
            problems.append("%s: %s (dimension-files) does not exist" % (DOC, path))
            continue
        where = defining_files(repo, symbol)
        if path not in where:
            problems.append("%s: %s does not define %s (defined in: %s)"
                            % (DOC, path, symbol, ", ".join(where) or "no file"))
        others = [w for w in where if w != path]
        if others:
            problems.append("%s: %s is also defined in %s, which the table does not name"
                            % (DOC, symbol, ", ".join(others)))
    return problems


GOOD_DOC = """# x
<!-- mesh-dims -->
| dimension | flag | what | chapter |
|---|---|---|---|
| `pp` | `--pp` | stages | 7 |
| `dp` | `--dp` | replicas | 4 |
<!-- /mesh-dims -->
<!-- dimension-files -->
| file | symbol | what |
|---|---|---|
| `common/comm/device_mesh.cpp` | `standard_dims` | order |
| `ch08_full_3d/factory.cpp` | `make_grad_sync` | strategy |
<!-- /dimension-files -->
"""
MESH_CPP = """std::vector<MeshDim> standard_dims(int dp, int pp) {
  return {{"pp", pp, true}, {"dp", dp, true}};
}
"""
FACTORY_CPP = """std::unique_ptr<GradSync> make_grad_sync(GptModel& model,
                                         const TrainerConfig& c) {
  return nullptr;
}
"""


def self_test():
    def repo_with(doc, files):
        root = tempfile.mkdtemp(prefix="archdoc-")
        for rel, text in dict({"common/comm/device_mesh.cpp": MESH_CPP,
                               "ch08_full_3d/factory.cpp": FACTORY_CPP,
                               "ch08_full_3d/trainer.cpp": "void f() {\n  make_grad_sync(m, c);\n}\n",
                               "ch08_full_3d/factory.h":
                                   "std::unique_ptr<GradSync> make_grad_sync(GptModel& m);\n",
                               DOC: doc}, **files).items():
            if text is None:
                continue
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            open(os.path.join(root, rel), "w", encoding="utf-8").write(text)
        return root

    cases = [
        ("good document", GOOD_DOC, {}, None),
        ("dimensions reordered", GOOD_DOC.replace("| `pp` | `--pp` | stages | 7 |\n| `dp` | `--dp` | replicas | 4 |",
                                                   "| `dp` | `--dp` | replicas | 4 |\n| `pp` | `--pp` | stages | 7 |"),
         {}, "standard_dims() returns"),
        ("a dimension added in code", GOOD_DOC,
         {"common/comm/device_mesh.cpp": MESH_CPP.replace('{"dp", dp, true}',
                                                          '{"dp", dp, true}, {"ep", 1, false}')},
         "standard_dims() returns"),
        ("a file that no longer exists", GOOD_DOC.replace("factory.cpp", "gone.cpp"), {},
         "does not exist"),
        ("a symbol moved to another file", GOOD_DOC,
         {"ch08_full_3d/factory.cpp": "int unrelated() {\n  return 0;\n}\n",
          "ch08_full_3d/other.cpp": FACTORY_CPP}, "does not define make_grad_sync"),
        ("a second definition the table does not name", GOOD_DOC,
         {"ch09_expert_parallel/factory.cpp": FACTORY_CPP}, "also defined in"),
        ("no marked table", GOOD_DOC.replace("dimension-files", "files"), {},
         "no <!-- dimension-files -->"),
    ]
    failed = 0
    for name, doc, files, expect in cases:
        root = repo_with(doc, files)
        try:
            problems = check(root)
        finally:
            shutil.rmtree(root)
        ok = (not problems) if expect is None else any(expect in p for p in problems)
        print("%s: %s%s" % ("ok" if ok else "FAILED", name,
                            "" if ok else " (got %s)" % problems))
        failed += not ok
    print("%d passed, %d failed" % (len(cases) - failed, failed))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.repo or not os.path.isdir(args.repo):
        print("architecture_doc_test: --repo ROOT (the repository) is required", file=sys.stderr)
        return 2
    problems = check(os.path.abspath(args.repo))
    for p in problems:
        print(p)
    if not problems:
        print("%s agrees with the code (mesh dimensions, the files a dimension touches)" % DOC)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
