#!/usr/bin/env python3
"""A gameplan `command` lens: `cargo clippy` findings as verdicts per file.

Speaks the command-lens protocol (README "Review"; examples/lenses/README.md):
reads {"lens": NAME, "units": [{"id", "path", "text", "size", "sha256"}, ...]}
on stdin, runs clippy once for the whole crate from the current directory
(gameplan runs a lens with the repo root as its working directory), and
answers on stdout

    {"verdicts": [{"unit": ID, "verdict": "clear"|"finding"|"n/a",
                   "findings": [{"title", "severity", "detail", "line"}]}]}

with one verdict for every unit it was given: `finding` when a diagnostic's
primary span is in the unit's file, `clear` for another Rust file, `n/a` for
a file clippy does not read (not `*.rs`).

When clippy could not judge (cargo missing, a manifest error, a build error
such as a type error: then lints of that crate are missing too), it answers
for NO unit, so the gate is INCOMPLETE rather than green, and says why on
stderr. It never answers `clear` for what it did not check.

Usage in a plan:

    [[lenses]]
    name = "clippy-clean"
    kind = "command"
    over = "files"
    files = ["src/**/*.rs"]
    argv = ["python3", "examples/lenses/clippy_lens.py"]

Arguments, when given, replace the cargo arguments (default:
`clippy --all-targets --message-format=json -- -D warnings`);
`--message-format=json` is added when missing. `CARGO` names the cargo
binary (default `cargo`). Standard library only.
"""

import json
import os
import re
import subprocess
import sys

DEFAULT_ARGS = ["clippy", "--all-targets", "--message-format=json", "--", "-D", "warnings"]

# A finding's `detail` is the compiler's rendered text; a macro-heavy one
# can run to pages, and the dump keeps every finding.
MAX_DETAIL = 4000

# rustc's own error codes (E0308): a build error, not a lint.
BUILD_ERROR_CODE = re.compile(r"^E\d{4}$")


def fail(message):
    """Answers for no unit: every unit is missing and the gate INCOMPLETE."""
    sys.stderr.write(f"clippy_lens: {message}\n")
    sys.exit(1)


def read_request():
    try:
        request = json.load(sys.stdin)
    except (ValueError, UnicodeDecodeError) as e:
        fail(f"stdin is not the lens request JSON ({e})")
    units = request.get("units") if isinstance(request, dict) else None
    if not isinstance(units, list) or not all(
        isinstance(u, dict) and isinstance(u.get("id"), str) for u in units
    ):
        fail('the request has no "units" list of objects with an "id"')
    return units


def cargo_command(argv):
    args = list(argv) if argv else list(DEFAULT_ARGS)
    if not any(a.startswith("--message-format") for a in args):
        at = args.index("--") if "--" in args else len(args)
        args.insert(at, "--message-format=json")
    return [os.environ.get("CARGO", "cargo")] + args


def repo_path(file_name, root):
    """A span's file as a repo-relative `/` path, or None when outside the repo."""
    path = file_name if os.path.isabs(file_name) else os.path.join(root, file_name)
    rel = os.path.relpath(os.path.normpath(path), root)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return rel.replace(os.sep, "/")


def primary_location(message, root):
    """(path, line) of a diagnostic's primary span inside the repo, following
    macro expansions out to the call site written in the repo."""
    for span in message.get("spans") or []:
        if not span.get("is_primary"):
            continue
        while span is not None:
            path = repo_path(span.get("file_name", ""), root)
            if path is not None and not path.startswith("<"):
                return path, span.get("line_start")
            span = (span.get("expansion") or {}).get("span")
    return None


def run_clippy(command, root):
    """The lints found (path, finding) and the reason clippy could not judge
    (None when it could)."""
    try:
        proc = subprocess.run(
            command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as e:
        return [], f"cannot run `{command[0]}`: {e}"
    lints, seen, build_errors, finished = [], set(), [], None
    for raw in proc.stdout.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if record.get("reason") == "build-finished":
            finished = record.get("success")
        if record.get("reason") != "compiler-message":
            continue
        message = record.get("message") or {}
        level = message.get("level", "")
        code = (message.get("code") or {}).get("code")
        if code is None or BUILD_ERROR_CODE.match(code):
            # Summaries ("aborting due to 2 previous errors", "3 warnings
            # emitted") have no spans; an error with spans and no lint code
            # is a build error.
            if level.startswith("error") and (code is not None or message.get("spans")):
                build_errors.append(message.get("rendered") or message.get("message", ""))
            continue
        where = primary_location(message, root)
        if where is None:
            continue
        path, line = where
        title = f"{code}: {message.get('message', '')}"
        # --all-targets compiles a file for the lib and its tests: the same
        # lint comes twice.
        key = (path, line, title)
        if key in seen:
            continue
        seen.add(key)
        detail = message.get("rendered") or ""
        if len(detail) > MAX_DETAIL:
            detail = detail[:MAX_DETAIL] + "\n[cut]"
        finding = {
            "title": title,
            "severity": "high" if level.startswith("error") else "medium",
            "detail": detail,
        }
        if isinstance(line, int):
            finding["line"] = line
        lints.append((path, finding))
    stderr = proc.stderr.decode("utf-8", "replace").strip()
    if build_errors:
        first = build_errors[0].strip().splitlines()
        return lints, "the crate does not build, so its lints are unknown:\n" + "\n".join(first[:12])
    if proc.returncode != 0 and not lints:
        tail = "\n".join(stderr.splitlines()[-12:])
        return lints, f"`{' '.join(command)}` failed (exit {proc.returncode}) without a lint:\n{tail}"
    if proc.returncode == 0 and finished is False:
        return lints, "cargo reported an unsuccessful build"
    return lints, None


def main():
    units = read_request()
    root = os.getcwd()
    command = cargo_command(sys.argv[1:])
    lints, failure = run_clippy(command, root)
    if failure is not None:
        fail(failure)
    by_path = {}
    for path, finding in lints:
        by_path.setdefault(path, []).append(finding)
    verdicts = []
    for unit in units:
        path = unit.get("path") or unit["id"]
        findings = by_path.get(path, [])
        if findings:
            findings.sort(key=lambda f: (f.get("line") or 0, f["title"]))
            verdicts.append({"unit": unit["id"], "verdict": "finding", "findings": findings})
        elif path.endswith(".rs"):
            verdicts.append({"unit": unit["id"], "verdict": "clear", "findings": []})
        else:
            verdicts.append({"unit": unit["id"], "verdict": "n/a", "findings": []})
    outside = sorted(set(by_path) - {u.get("path") or u["id"] for u in units})
    if outside:
        # Either outside the lens's `files`, or units whose clean verdict
        # gameplan reused (it sends only changed units), though another
        # file's change gave them a lint (dead code, say).
        sys.stderr.write(
            f"clippy_lens: {len(outside)} file(s) with lints were not sent as units "
            f"(e.g. {outside[0]}): outside the lens's `files`, or reused as clean; "
            f"`gameplan plan run --no-reuse` judges every unit again\n"
        )
    json.dump({"verdicts": verdicts}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
