"""The command outputs the docs show are what the commands print (scripts/doc_outputs.py): every
console block is generated from its command, or says why it is not; a stale or unmarked block
fails here, naming the file and line."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("LOOM_BUILD_DIR", os.path.join(ROOT, "build"))
SCRIPT = os.path.join(ROOT, "scripts", "doc_outputs.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, "--build", BUILD] + list(args),
                          capture_output=True, text=True, timeout=900)


def test_every_shown_output_is_what_its_command_prints():
    proc = run()
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_stale_or_unmarked_block_is_named(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- output: generated -->\n```\n$ echo fresh\nstale\n```\n\n"
                   "```\n$ echo unmarked\nunmarked\n```\n\n"
                   "```\n$ echo only\n$ echo commands\n```\n")
    proc = run(str(doc))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "doc.md:2: the output differs from what `echo fresh` prints now" in proc.stderr
    assert "doc.md:7: console output without an '<!-- output: ... -->' marker" in proc.stderr
    assert "doc.md:12" not in proc.stderr  # commands alone need no marker
    proc = run("--update", str(doc))
    assert proc.returncode == 1  # the unmarked block is still an error
    assert "$ echo fresh\nfresh\n```" in doc.read_text()


def test_every_flag_of_every_command_is_in_the_cli_manual():
    """Each flag a command's --help prints appears in docs/CLI.md: the manual cannot fall behind
    the tool's flags."""
    import re
    loom = os.path.join(BUILD, "tools", "loom")
    manual = open(os.path.join(ROOT, "docs", "CLI.md")).read()
    missing = []
    for command in (["run"], ["inspect"], ["transpile"], ["topo"], ["bench", "collective"],
                    ["bench", "copies"], ["simulate"], ["devices"], ["launch"]):
        text = subprocess.run([loom] + command + ["--help"], capture_output=True, text=True,
                              timeout=60)
        out = text.stdout + text.stderr
        flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", out)) - {"--help"}
        assert flags, "loom %s --help printed no flags: %s" % (" ".join(command), out)
        for flag in sorted(flags):
            if not re.search(re.escape(flag) + r"(?![a-z0-9-])", manual):
                missing.append("loom %s %s" % (" ".join(command), flag))
    assert not missing, "flags missing from docs/CLI.md: " + ", ".join(missing)
