"""The commands shown in README.md and docs/*.md, checked statically against the repository and the
installed dadtrun: a doc that goes stale (a removed flag, a renamed file, a gone make target, a
variable nothing reads) fails here. Plain pytest, no launcher, no job started; a few seconds. One
file over 500 lines: every check reads the same extraction of the docs' commands (at its top), and
each check, with the self-tests that show it can fail, is short.

What is read: every line of a fenced code block (a line ending in a backslash joined with the next)
and every inline `code` span, each with its file and line. What is checked:

* dadtrun options: in each command, the tokens after the word `dadtrun` up to the program (the first
  token that is neither an option nor an option's value, or `--`) must be options that
  `dadtrun --help` lists, as `--flag`, `--flag VALUE` or `--flag=VALUE` (`-np=2` and `-Hhost:2` too;
  how many values an option takes is read from the help's placeholders, e.g. `--blacklist-cooldown-
  range MIN MAX` takes two). Options of other tools on the same line (`python3 -m pytest -q`,
  `mpirun --oversubscribe`) are not dadtrun's and are not looked at. Exceptions: dadtrun's internal
  modes (INTERNAL_MODES), which --help does not list on purpose, must still be handled in dadtrun/;
  and a command the doc shows being refused (dadtrun's "unknown flag 'X'" within the next few lines).
* repository paths: a word that starts with one of the repository's tracked top-level directories
  and a slash (`examples/...`, `tools/...`, `docs/...`) must be a tracked file or directory; so must
  the package of a Bazel label (`//test/fuzz:corpus_replay_test`, with the target named in its
  BUILD file), and the target of a relative Markdown link, with its #section. A path git ignores
  (a build output such as frameworks/python/dadt/_core.so) need not exist. Without git (a source
  tarball) the files on disk stand in for git ls-files. Placeholder rule: a path is checked only up
  to its first component holding a placeholder (`<n>`, `{rank}`, `$VAR`, `...`, or all capitals:
  `DIR`, `HOST`); `{h,cc}` is expanded as a shell does; a component with a glob (`test_*.py`) must
  match something. A trailing `:LINE` or `#anchor` is dropped. Words that do not start with a
  top-level directory (`train.py`, `your_script.py`, `/tmp/x`, `HOST:PORT`) are never checked, nor
  are FOREIGN_PATHS, which name another repository's files.
* make targets: the words after `make` in command position (start of a command, after `;`, `&&`,
  `|` or `VAR=value`) that are not options or `VAR=value` must be targets of the Makefile. A line
  where such a word ends in a colon is make's own output (`make test: OK`), not a command.
* DADT_* variables: every `DADT_NAME` anywhere in the docs must appear, outside whole-line comments,
  in the sources under SOURCE_DIRS; `DADT_PREFIX_*` must match at least one such name. Variables
  that only the test harness reads are in TEST_VARIABLES and must appear under test/ or in the
  Makefile instead; NOT_READ lists the rest, each saying why.
* `python -m dadt.<module>`: the module must be importable (importlib.util.find_spec).
* script options: in `python3 examples/.../x.py --flag ...` (a repository .py file run by python),
  each `--flag` up to the end of the command must appear as a string ("--flag") in that script,
  as argparse declares it; PASS_THROUGH lists scripts that hand their options on to another program.

What it cannot check: that a command runs or does what the doc says (no job is started; the doc's
quoted output and error messages are not compared with the code's), values of options (`-np 0` is
only parsed, not judged), options of programs other than dadtrun, options shown alone in prose
(`--liveness-timeout-seconds S` in a table, outside a `dadtrun ...` command), prose outside code,
Python code in the docs beyond `-m dadt.*` modules, and placeholder paths. The Markdown files under
docs/benchmarks/ are not read (docs/*.md only), though links to them are checked.
"""

import fnmatch
import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Where DADT_* variables must be read: the runtime, the launcher, the Python package, the tools and
# the examples (autotune/ and timeline/ are runtime libraries at the top level).
SOURCE_DIRS = ("runtime", "autotune", "timeline", "dadtrun", "frameworks/python", "tools", "examples")
SOURCE_EXTS = (".cc", ".h", ".py", ".sh", ".bzl", ".c", ".cpp", ".hpp")

# Variables that only the test suites read, not the product: the docs that describe the tests name
# them. Each must be read under test/ or in the Makefile instead.
TEST_VARIABLES = {
    # The per-test watchdog of the multi-rank pytest suites (test/python_*/conftest.py), named in
    # docs/frameworks.md's description of those suites.
    "DADT_TEST_WATCHDOG_S",
}

# DADT_* names the docs may show although nothing reads them, each with a comment saying why.
# Empty today; a name here that a source does read fails test_exception_lists_are_current.
NOT_READ = set()

# dadtrun's internal modes: command lines that dadtrun builds for itself (a rank's output relay, a
# Slurm task, the elastic store) and docs/ describe; --help leaves them out on purpose. Each must
# still be parsed somewhere in dadtrun/.
INTERNAL_MODES = {"--line-relay", "--slurm-task-env", "--serve-store"}

# Paths that look like this repository's but name another one's, with why.
FOREIGN_PATHS = {
    # Horovod's own test directory: the conformance tier runs Horovod's unchanged test files from a
    # checkout of Horovod (HOROVOD_TEST_DIR); they are not in this repository.
    "test/parallel": "Horovod's",
}

# Repository scripts whose options belong to the program they run, not to the script.
PASS_THROUGH = {
    "tools/bazel_build.py",  # adds dadt's flags and runs bazel with the rest (--config=asan, ...)
}

SHELL_OPERATORS = set(";&|()")
# A doc may show dadtrun refusing an unknown option (`dadtrun --bogus -np 2 true`) when dadtrun's
# "unknown flag '--bogus'" follows within this many lines.
REFUSAL_LINES = 3


# ---------------------------------------------------------------------------------------------
# Reading the docs


def doc_files():
    docs = [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(REPO, "docs")))
            if f.endswith(".md")]
    return ["README.md"] + docs


@functools.lru_cache(maxsize=None)
def doc_lines(doc):
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
        return f.read().splitlines()


FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


@functools.lru_cache(maxsize=None)
def snippets(doc):
    """(line number, text) of each code-block line (continuations joined) and inline code span."""
    lines = doc_lines(doc)
    out = []
    fence = None
    paragraph = []  # (line number, text) of the prose lines since the last blank line

    def flush():
        text = "\n".join(t for _, t in paragraph)
        for m in SPAN.finditer(text):
            lineno = paragraph[0][0] + text.count("\n", 0, m.start())
            out.append((lineno, m.group(2).replace("\n", " ").strip()))
        paragraph.clear()

    i = 0
    while i < len(lines):
        line, lineno = lines[i], i + 1
        m = FENCE.match(line)
        if fence is None and m:
            flush()
            fence = m.group(1)
        elif fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            else:
                while line.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line[:-1] + " " + lines[i].strip()
                out.append((lineno, line))
        elif not line.strip():
            flush()
        else:
            paragraph.append((lineno, line))
        i += 1
    flush()
    return out


def all_snippets():
    for doc in doc_files():
        for lineno, text in snippets(doc):
            yield doc, lineno, text


def words(text):
    """Shell words of text (quotes removed); runs of ; & | ( ) are words of their own."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: an apostrophe in prose
        return text.split()


def is_operator(word):
    return bool(word) and set(word) <= SHELL_OPERATORS


def report(problems):
    assert not problems, "\n".join([f"{len(problems)} stale doc line(s):"] + problems)


# ---------------------------------------------------------------------------------------------
# The repository


def has_git():
    return shutil.which("git") is not None and os.path.exists(os.path.join(REPO, ".git"))


def walked_files():
    """Without git (a source tarball): the files on disk, less Bazel's and Python's outputs."""
    for root, dirs, files in os.walk(REPO):
        rel = os.path.relpath(root, REPO)
        dirs[:] = [d for d in dirs if not (d.startswith((".git", "bazel-")) or d == "__pycache__"
                                           or (rel == "." and d in ("build", "dist")))]
        for f in files:
            yield os.path.normpath(os.path.join(rel, f))


@functools.lru_cache(maxsize=None)
def tracked():
    """Tracked files (git ls-files) and the directories that hold them."""
    if has_git():
        files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.split("\n")
    else:
        files = list(walked_files())
    paths = set()
    for f in filter(None, files):
        paths.add(f)
        parts = f.split("/")
        for n in range(1, len(parts)):
            paths.add("/".join(parts[:n]))
    return paths


@functools.lru_cache(maxsize=None)
def top_level_dirs():
    return sorted({p.split("/")[0] for p in tracked() if "/" in p})


@functools.lru_cache(maxsize=None)
def dadtrun_options():
    """{option: how many values it takes}, from dadtrun --help.

    The help lists options at the start of an indented line: `-np, --num-proc N`, `--gloo`,
    `--blacklist-cooldown-range MIN MAX`, or several on one line separated by ", ". The words after
    an option up to two spaces are its value placeholders; an alias with none (`-np` above) takes
    those of the one after it.
    """
    exe = shutil.which("dadtrun")
    assert exe, "dadtrun is not on PATH (install dadt first)"
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"dadtrun --help exited with {out.returncode}: {out.stderr}"
    options = {}
    for line in out.stdout.splitlines():
        m = re.match(r"\s+(-\S.*?)(?:\s{2,}|$)", line)
        if not m:
            continue
        group = [p.strip().rstrip(",").split() for p in m.group(1).split(", ")]
        group = [p for p in group if p and p[0].startswith("-")]
        for n, part in enumerate(group):
            values = len(part) - 1
            later = [len(p) - 1 for p in group[n + 1:]]
            if values == 0 and later and later[0] > 0:
                values = later[0]
            options[part[0]] = values
    assert "--num-proc" in options and "--gloo" in options, f"cannot read dadtrun --help:\n{out.stdout}"
    return options


@functools.lru_cache(maxsize=None)
def makefile_targets():
    targets = set()
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.%-][^:=#\s]*(?:[ \t]+[^:=#\s]+)*)[ \t]*::?(?!=)", line)
            if m and not line.startswith("\t"):
                targets.update(m.group(1).split())
    return targets


def source_files(roots, exts=SOURCE_EXTS):
    for root in roots:
        for f in sorted(tracked()):
            if (f == root or f.startswith(root + "/")) and f.endswith(exts):
                yield f


def names_in(files, pattern=re.compile(r"\bDADT_[A-Z0-9_]*[A-Z0-9]\b")):
    """The DADT_* names in files, whole-line comments left out."""
    names = set()
    for f in files:
        with open(os.path.join(REPO, f), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.lstrip().startswith(("#", "//")):
                    names.update(pattern.findall(line))
    return names


# ---------------------------------------------------------------------------------------------
# The checks


def refused_in_doc(doc, lineno, option):
    """Whether the doc shows dadtrun refusing option just below the command (an error example)."""
    below = doc_lines(doc)[lineno - 1:lineno - 1 + REFUSAL_LINES + 1]
    return any(f"unknown flag '{option}'" in line for line in below)


def dadtrun_option_problems(text):
    """What is wrong with the dadtrun options in one snippet (a list of messages)."""
    options = dadtrun_options()
    problems = []
    ws = words(text)
    for start, word in enumerate(ws):
        if os.path.basename(word) != "dadtrun":
            continue
        i = start + 1
        while i < len(ws):
            w = ws[i]
            if w == "--" or not w.startswith("-") or w == "-" or is_operator(w):
                break  # the program, or the end of this command
            name, eq, _ = w.rstrip(",;.:)").partition("=")
            if name not in options and not name.startswith("--") and name[:2] in options:
                name, eq = name[:2], "="  # "-Hlocalhost:2": the value attached
            if name in INTERNAL_MODES:
                break  # the rest is the internal mode's own command line
            if name not in options:
                problems.append(f"dadtrun has no option {name!r} (not in dadtrun --help)")
                break
            i += 1 if eq else 1 + options[name]
    return problems


def test_dadtrun_options_are_in_help():
    problems = []
    for doc, lineno, text in all_snippets():
        for problem in dadtrun_option_problems(text):
            option = re.search(r"option '([^']+)'", problem).group(1)
            if not refused_in_doc(doc, lineno, option):
                problems.append(f"{doc}:{lineno}: {problem}: {text.strip()}")
    report(problems)


def test_internal_modes_are_parsed_by_dadtrun():
    sources = "".join(open(os.path.join(REPO, f), encoding="utf-8").read()
                      for f in source_files(["dadtrun"], (".cc", ".h")))
    missing = [m for m in sorted(INTERNAL_MODES) if f'"{m}"' not in sources]
    assert not missing, f"INTERNAL_MODES names modes dadtrun/ no longer has: {missing}"


PLACEHOLDER = re.compile(r"[<>{}$]|\.\.\.|…|^[A-Z_]+$")
GLOB = re.compile(r"[*?\[]")


def expand_braces(path):
    """runtime/c_api.{h,cc} -> runtime/c_api.h, runtime/c_api.cc (one level, as a shell does)."""
    m = re.search(r"\{([^{}]*,[^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",")
            for p in expand_braces(path[:m.start()] + alt + path[m.end():])]


def path_problem(path):
    """None if path (starting with a top-level directory) is in the repository, else why not."""
    path = re.sub(r"(:\d+)+$", "", path.split("#")[0].rstrip(".,:;"))
    for one in expand_braces(path):
        why = one_path_problem(one)
        if why:
            return why
    return None


def one_path_problem(path):
    checked = []
    for part in path.split("/"):
        if not part or PLACEHOLDER.search(part):
            break
        checked.append(part)
    prefix = "/".join(checked)
    if any(prefix == f or prefix.startswith(f + "/") for f in FOREIGN_PATHS):
        return None
    if GLOB.search(prefix):
        if not any(fnmatch.fnmatch(p, prefix) for p in tracked()):
            return f"nothing in the repository matches {prefix!r}"
        return None
    if prefix and prefix not in tracked() and not git_ignored(prefix):
        return f"{prefix!r} is not in the repository (git ls-files)"
    return None


def git_ignored(path):
    """Whether git ignores path: a build output (frameworks/python/dadt/_core.so), not a source."""
    if has_git():
        return any(subprocess.run(["git", "check-ignore", "-q", "--no-index", p],
                                  cwd=REPO).returncode == 0 for p in (path, path + "/"))
    with open(os.path.join(REPO, ".gitignore"), encoding="utf-8") as f:  # plain patterns only
        patterns = [p.strip().strip("/") for p in f if p.strip() and not p.startswith("#")]
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(os.path.basename(p), pat)
               for p in prefixes for pat in patterns)


def repo_paths(text):
    tops = "|".join(re.escape(t) for t in top_level_dirs())
    return re.findall(rf"(?<![\w./~$@-])((?:{tops})/[^\s'\"`()\[\],;|=]*)", text)


def bazel_label_problem(label):
    """None if the package of a Bazel label exists with its target, else why not. A target is a
    name in the package's BUILD file, a file of the package, or a name a list comprehension builds
    (`abi + "_conformance_test"` makes mpi_conformance_test: the literal suffix is matched)."""
    package, _, target = label[2:].partition(":")
    if package.endswith("..."):
        package = package[:-3].rstrip("/")
        return path_problem(package) if package else None
    build = next((f"{package}/{b}" for b in ("BUILD", "BUILD.bazel") if f"{package}/{b}" in tracked()),
                 None)
    if build is None:
        return f"Bazel package //{package} has no BUILD file"
    if target and not PLACEHOLDER.search(target) and f"{package}/{target}" not in tracked():
        with open(os.path.join(REPO, build), encoding="utf-8") as f:
            text = f.read()
        suffixes = re.findall(r'\+\s*"([\w./+-]+)"', text)
        if f'"{target}"' not in text and not any(target.endswith(s) for s in suffixes):
            return f"{build} names no target {target!r}"
    return None


def test_repository_paths_exist():
    problems = []
    for doc, lineno, text in all_snippets():
        for path in repo_paths(text):
            why = path_problem(path)
            if why:
                problems.append(f"{doc}:{lineno}: {why}: {text.strip()}")
        for label in re.findall(r"(?<![\w@:])//[\w/.-]+(?::[\w./+-]+)?", text):
            why = bazel_label_problem(label)
            if why:
                problems.append(f"{doc}:{lineno}: {why}: {text.strip()}")
    report(problems)


@functools.lru_cache(maxsize=None)
def anchors(doc):
    """The #anchors of a Markdown file's headings, as GitHub makes them (lower case, punctuation
    but - and _ dropped, spaces to -, a repeated one numbered -1, -2, ...)."""
    out, seen, fence = set(), {}, False
    for line in doc_lines(doc):
        if FENCE.match(line):
            fence = not fence
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return out


def test_markdown_links_resolve():
    """Relative links name a file in the repository, and a #section of a Markdown file exists."""
    problems = []
    for doc in doc_files():
        for n, line in enumerate(doc_lines(doc), 1):
            for link in re.findall(r"\]\(([^)\s]+)\)", line):
                target, _, anchor = link.partition("#")
                if re.match(r"[a-z]+:", target):
                    continue  # a URL
                path = os.path.normpath(os.path.join(os.path.dirname(doc), target)) if target else doc
                if path not in tracked():
                    problems.append(f"{doc}:{n}: link to {link!r}: {path} is not in the repository")
                elif anchor and path.endswith(".md") and anchor not in anchors(path):
                    problems.append(f"{doc}:{n}: link to {link!r}: {path} has no section #{anchor}")
    report(problems)


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def make_targets_shown(text):
    ws = words(text)
    for i, w in enumerate(ws):
        before = ws[i - 1] if i else None
        if w != "make" or not (before is None or is_operator(before) or ASSIGNMENT.match(before)
                               or before in ("sudo", "time", "then", "do")):
            continue
        if any(t.endswith(":") for t in ws[i + 1:]):
            return  # make's own output ("make test: OK"), not a command
        for target in ws[i + 1:]:
            if is_operator(target) or target.startswith("#"):
                break
            if not target.startswith("-") and not ASSIGNMENT.match(target):
                yield target


def test_make_targets_exist():
    targets = makefile_targets()
    problems = []
    for doc, lineno, text in all_snippets():
        for target in make_targets_shown(text):
            if PLACEHOLDER.search(target):
                continue
            if target not in targets:
                problems.append(f"{doc}:{lineno}: the Makefile has no target {target!r}: {text.strip()}")
    report(problems)


DOC_VARIABLE = re.compile(r"\bDADT_[A-Z0-9_]*[A-Z0-9](?:_\*)?|\bDADT_\*")


def test_dadt_variables_are_read():
    read = names_in(source_files(SOURCE_DIRS))
    test_read = names_in(list(source_files(["test"])) + ["Makefile"])
    problems = []
    for doc in doc_files():
        for n, line in enumerate(doc_lines(doc), 1):
            for name in DOC_VARIABLE.findall(line):
                if name.endswith("*"):
                    prefix = name[:-1]
                    if not any(r.startswith(prefix) for r in read | TEST_VARIABLES):
                        problems.append(f"{doc}:{n}: no source reads a variable {name}")
                elif name in NOT_READ:
                    continue
                elif name in TEST_VARIABLES:
                    if name not in test_read:
                        problems.append(f"{doc}:{n}: {name} is in TEST_VARIABLES but nothing under "
                                        "test/ or in the Makefile reads it")
                elif name not in read:
                    problems.append(f"{doc}:{n}: no source under {', '.join(SOURCE_DIRS)} reads {name}")
    report(problems)


def test_exception_lists_are_current():
    read = names_in(source_files(SOURCE_DIRS))
    stale = sorted(n for n in NOT_READ | TEST_VARIABLES if n in read)
    assert not stale, f"NOT_READ/TEST_VARIABLES name variables the sources read now; drop them: {stale}"


def test_python_m_dadt_modules_import():
    problems = []
    for doc, lineno, text in all_snippets():
        ws = words(text)
        for i, w in enumerate(ws[:-1]):
            module = ws[i + 1]
            if w == "-m" and (module == "dadt" or module.startswith("dadt.")):
                module = module.rstrip(".,:;")
                try:
                    found = importlib.util.find_spec(module) is not None
                except ImportError:
                    found = False
                if not found:
                    problems.append(f"{doc}:{lineno}: no module {module}: {text.strip()}")
    report(problems)


PYTHON_WORD = re.compile(r"^(.*/)?python[0-9.]*$|^\$\{?PY")


def script_option_problems(text):
    """Options given to a repository Python script that the script does not declare."""
    problems = []
    ws = words(text)
    for i, script in enumerate(ws[1:], 1):
        if (not script.endswith(".py") or script not in tracked() or script in PASS_THROUGH
                or not PYTHON_WORD.match(ws[i - 1])):
            continue
        with open(os.path.join(REPO, script), encoding="utf-8") as f:
            source = f.read()
        for w in ws[i + 1:]:
            if is_operator(w):
                break
            name = w.partition("=")[0]
            if (name.startswith("--") and len(name) > 2 and f'"{name}"' not in source
                    and f"'{name}'" not in source):
                problems.append(f"{script} has no option {name!r}")
    return problems


def test_script_options_exist():
    problems = []
    for doc, lineno, text in all_snippets():
        for problem in script_option_problems(text):
            problems.append(f"{doc}:{lineno}: {problem}: {text.strip()}")
    report(problems)


@pytest.mark.parametrize("snippet, expected", [
    ("dadtrun --gloo -np 2 python3 -m pytest -q x.py", []),
    ("dadtrun -np=2 -Hlocalhost:2 --fusion-threshold-mb=0 true", []),
    ("dadtrun --mpi-args \"--mca btl self,vader\" --blacklist-cooldown-range 1 2 python", []),
    ("mpirun --oversubscribe -np 2 python3 x.py && dadtrun -np 2 -- python --bogus", []),
    ("dadtrun -np 2 --no-such-flag python3 x.py", ["dadtrun has no option '--no-such-flag' "
                                                  "(not in dadtrun --help)"]),
])
def test_option_parser_itself(snippet, expected):
    assert dadtrun_option_problems(snippet) == expected


@pytest.mark.parametrize("path, ok", [
    ("examples/pytorch/train_digits.py", True),
    ("examples/<framework>/train_digits.py", True),  # a placeholder: checked up to examples/
    ("runtime/c_api.{h,cc}", True),
    ("runtime/c_api.{h,nope}", False),
    ("test/python_unit/test_*.py", True),
    ("test/python_unit/test_*.nope", False),
    ("tools/run_python_tests.sh:12.", True),
    ("examples/pytorch/train_digit.py", False),
])
def test_path_rule_itself(path, ok):
    assert (path_problem(path) is None) == ok


@pytest.mark.parametrize("snippet, expected", [
    ("make demo NP=4 && make test-cc   # comment", ["demo", "test-cc"]),
    ("PYTHON=python3.11 make install", ["install"]),
    ("make test: OK", []),
    ("cmake --build . && gmake all", []),
])
def test_make_rule_itself(snippet, expected):
    assert list(make_targets_shown(snippet)) == expected
