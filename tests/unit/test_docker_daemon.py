"""scripts/docker_daemon.sh's apt look-ups under `set -o pipefail`, as scripts/test.sh sources it:
a stub apt-cache on PATH writes a policy far longer than a pipe holds, a stub apt-get records its
calls, so no package is installed and no daemon started."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "docker_daemon.sh"
MIRROR_LINE = "        500 http://mirror.example/debian bookworm/main amd64 Packages\n"


@pytest.fixture
def apt(tmp_path: Path) -> Path:
    """A stub apt-cache whose lists know the packages named in known/ (known-after-update/ once
    `apt-get update` ran), a stub apt-get that logs each call, and `id -u` = 0."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (tmp_path / "known").mkdir()
    (tmp_path / "known-after-update").mkdir()
    # The candidate comes first, then ~1 MiB of version table: `grep -q` stops reading at once.
    (tmp_path / "table").write_text(MIRROR_LINE * 16000)
    (stubs / "apt-cache").write_text(f"""#!/bin/bash
pkg="$2" lists={tmp_path}/known
[ -e {tmp_path}/updated ] && lists={tmp_path}/known-after-update
candidate="$(cat "$lists/$pkg" 2>/dev/null || echo '(none)')"
printf '%s:\\n  Installed: (none)\\n  Candidate: %s\\n  Version table:\\n' "$pkg" "$candidate"
exec cat {tmp_path}/table
""")
    (stubs / "apt-get").write_text(f"""#!/bin/bash
echo "$*" >> {tmp_path}/apt-get.log
[ "$1" = update ] && touch {tmp_path}/updated
exit 0
""")
    (stubs / "id").write_text("#!/bin/bash\necho 0\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    return tmp_path


def _bash(apt: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"set -uo pipefail\n. {SCRIPT}\n{script}"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{apt / 'bin'}:{os.environ['PATH']}"})


def _apt_get_calls(apt: Path) -> list[str]:
    log = apt / "apt-get.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_long_policy_is_read_whole_under_pipefail(apt):
    (apt / "known" / "docker.io").write_text("20.10.24+dfsg1-1+deb12u1+b6")
    # The stub does what a real apt-cache does to a reader that stops early: the pipe fails.
    old = _bash(apt, 'apt-cache policy docker.io | grep -q "Candidate: [0-9]"; echo "rc=$?"')
    assert old.stdout.strip() == "rc=141"
    out = _bash(apt, '_apt_candidate docker.io; echo "rc=$? candidate=$APT_CANDIDATE"')
    assert out.stdout.strip() == "rc=0 candidate=20.10.24+dfsg1-1+deb12u1+b6", out.stderr
    assert _apt_get_calls(apt) == []  # lists that know the package are not updated


def test_stale_lists_are_updated_once_and_read_again(apt):
    (apt / "known-after-update" / "docker.io").write_text("20.10.24+dfsg1-1+deb12u1+b6")
    out = _bash(apt, '_apt_candidate docker.io; echo "rc=$? candidate=$APT_CANDIDATE"\n'
                     '_apt_candidate docker-compose-plugin; echo "rc=$? candidate=$APT_CANDIDATE"')
    assert out.stdout.splitlines()[-2:] == ["rc=0 candidate=20.10.24+dfsg1-1+deb12u1+b6",
                                            "rc=1 candidate="], out.stderr
    assert _apt_get_calls(apt) == ["update -q"]


def test_compose_is_debians_standalone_where_the_plugin_is_not_packaged(apt):
    (apt / "known-after-update" / "docker-compose").write_text("1.29.2-3")
    out = _bash(apt, '_compose_install; echo "rc=$?"')
    assert out.stdout.splitlines()[-1] == "rc=0", out.stdout + out.stderr
    assert "installing Debian's docker-compose 1.29.2-3 (the standalone docker-compose)" in out.stdout
    assert _apt_get_calls(apt) == ["update -q",
                                   "install -y -q --no-install-recommends docker-compose"]


def test_the_plugin_is_preferred_where_packaged(apt):
    (apt / "known" / "docker-compose-plugin").write_text("2.40.3-1")
    (apt / "known" / "docker-compose").write_text("1.29.2-3")
    out = _bash(apt, '_compose_install; echo "rc=$?"')
    assert out.stdout.splitlines()[-1] == "rc=0", out.stdout + out.stderr
    assert _apt_get_calls(apt) == ["install -y -q --no-install-recommends docker-compose-plugin"]


def _bash_alone(apt: Path, docker_rc: int, script: str) -> subprocess.CompletedProcess:
    """`_bash` with nothing of this machine's docker on PATH or in DOCKER_HOST (test.sh exports the
    daemon it started): the stubs, a `docker` that exits with ``docker_rc`` (0: a daemon and
    compose answer), and the tools the stubs and the script run."""
    alone = apt / "alone"
    alone.mkdir()
    for stub in (apt / "bin").iterdir():
        (alone / stub.name).symlink_to(stub)
    for tool in ("cat", "timeout", "touch"):
        (alone / tool).symlink_to(shutil.which(tool))
    (alone / "docker").write_text(f"#!/bin/bash\nexit {docker_rc}\n")
    (alone / "docker").chmod(0o755)
    return subprocess.run(["/bin/bash", "-c", f"set -uo pipefail\n. {SCRIPT}\n{script}"],
                          capture_output=True, text=True, timeout=60,
                          env={**{k: v for k, v in os.environ.items() if k != "DOCKER_HOST"},
                               "PATH": str(alone)})


def test_docker_install_installs_what_is_missing_and_starts_nothing(apt):
    (apt / "known-after-update" / "docker-compose").write_text("1.29.2-3")
    (apt / "known-after-update" / "docker.io").write_text("20.10.24+dfsg1-1+deb12u1+b6")
    out = _bash_alone(apt, 1, 'docker_install; echo "rc=$? host=${DOCKER_HOST:-none}"')
    assert out.stdout.splitlines()[-1] == "rc=0 host=none", out.stdout + out.stderr
    assert _apt_get_calls(apt) == ["update -q",
                                   "install -y -q --no-install-recommends docker-compose",
                                   "install -y -q --no-install-recommends docker.io"]


def test_docker_install_leaves_an_answering_daemon_and_compose_alone(apt):
    out = _bash_alone(apt, 0, 'docker_install; echo "rc=$?"')
    assert out.stdout.splitlines()[-1] == "rc=0", out.stdout + out.stderr
    assert _apt_get_calls(apt) == []
