"""The README opens with the two set-up commands, and .ci/run runs exactly those."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).strip().splitlines()
    assert len(block) == 2, block
    install, test = block
    ci = (ROOT / ".ci" / "run").read_text()
    assert install in ci and test in ci
    assert ci.index(install) < ci.index(test)
