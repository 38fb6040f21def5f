# A Docker daemon and a compose command for the container tests (tests/unit/runtime/test_container.py)
# and the compose checks (tests/unit/test_deploy.py), sourced by scripts/test.sh: `docker_install`
# beside the rest of the setup, `docker_start` before pytest, `docker_stop` on EXIT.
#
# A daemon that already answers is used as it is. Otherwise, as root, this starts a private one for
# the run: its own data root, exec root, socket, pidfile and log under a temp dir (so it touches no
# daemon or image store of the machine), DOCKER_HOST pointing at it; `docker_stop` stops it by the
# pid in its pidfile and removes the dir. When dockerd or a compose command is missing and this is
# root on Debian, Debian's packages are installed first (as scripts/setup_browser.sh installs
# Chromium): docker.io, and docker-compose-plugin where the apt sources have it, else Debian's
# docker-compose. `docker_start` returns 1 with the reason when it ends without a daemon or compose.
#
# Sourced into scripts that run with `set -o pipefail`: no pipe here ends in a reader that stops
# early (`grep -q`, `head`), whose writer then dies of SIGPIPE and fails the whole pipe (141).

DOCKER_TMP=""
DOCKER_PID=""
DOCKER_READY_S="${DOCKER_READY_S:-60}"
APT_UPDATED=""

_docker_answers() { command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; }

# The compose command the tests use: the docker CLI's plugin, else the standalone docker-compose.
_compose_answers() {
  { command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; } \
    || { command -v docker-compose >/dev/null 2>&1 && docker-compose version >/dev/null 2>&1; }
}

_apt_update() {
  APT_UPDATED=1
  echo "docker: apt-get update (the package lists may be stale or empty)..."
  apt-get update -q >/dev/null 2>&1
}

# Sets APT_CANDIDATE to the candidate version of Debian package $1, empty where the apt sources have
# none; 1 then. The policy is read whole into a variable: `apt-cache policy | grep -q` fails under
# pipefail once grep stops reading early. Where the lists have no candidate, they are updated once
# and read again.
APT_CANDIDATE=""
_apt_candidate() {
  local policy
  policy="$(apt-cache policy "$1" 2>/dev/null)"
  if [[ ! "$policy" =~ Candidate:\ [0-9] ]] && [ -z "$APT_UPDATED" ]; then
    _apt_update
    policy="$(apt-cache policy "$1" 2>/dev/null)"
  fi
  APT_CANDIDATE=""
  [[ "$policy" =~ Candidate:\ ([0-9][^[:space:]]*) ]] && APT_CANDIDATE="${BASH_REMATCH[1]}"
}

_apt_root() { [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; }

# Installs Debian's package $1 ($2 says what it brings); 1 with the reason where it cannot.
_apt_install() {
  if ! _apt_root; then
    echo "docker: installing $2 needs root and apt-get"
    return 1
  fi
  if ! _apt_candidate "$1"; then
    echo "docker: no $1 package in this machine's apt sources, even after apt-get update"
    return 1
  fi
  echo "docker: installing Debian's $1 $APT_CANDIDATE ($2)..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$1" >/dev/null \
    && return 0
  [ -z "$APT_UPDATED" ] || { echo "docker: apt-get install $1 failed"; return 1; }
  _apt_update   # a stale list names files the mirror no longer has
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$1" >/dev/null \
    || { echo "docker: apt-get install $1 failed"; return 1; }
}

_compose_install() {
  if _apt_root && _apt_candidate docker-compose-plugin; then
    _apt_install docker-compose-plugin "the docker compose plugin"
  else
    _apt_install docker-compose "the standalone docker-compose"
  fi
}

# Installs what docker_start would install, without starting anything: scripts/test.sh runs it
# beside the pip installs of scripts/setup.sh. Where it cannot (not root, no package), docker_start
# says why later.
docker_install() {
  _compose_answers || _compose_install || true
  _docker_answers || command -v dockerd >/dev/null 2>&1 \
    || _apt_install docker.io "dockerd, containerd, runc" || true
}

docker_start() {
  local compose_ok=0
  _compose_answers || _compose_install || compose_ok=1
  [ "$compose_ok" -eq 0 ] || echo "docker: no compose command: the compose checks cannot run"
  if _docker_answers; then
    echo "docker: a daemon answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null)); using it"
    return "$compose_ok"
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "docker: no daemon answers and starting one needs root"
    return 1
  fi
  command -v dockerd >/dev/null 2>&1 || _apt_install docker.io "dockerd, containerd, runc" || return 1
  DOCKER_TMP="$(mktemp -d /tmp/tuner-dockerd.XXXXXX)"
  local t0 ms
  t0=$(date +%s%N)
  dockerd --data-root "$DOCKER_TMP/data" --exec-root "$DOCKER_TMP/exec" \
    --pidfile "$DOCKER_TMP/dockerd.pid" --host "unix://$DOCKER_TMP/docker.sock" \
    >"$DOCKER_TMP/dockerd.log" 2>&1 &
  DOCKER_PID=$!
  export DOCKER_HOST="unix://$DOCKER_TMP/docker.sock"
  while ! _docker_answers; do
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ "$ms" -ge $((DOCKER_READY_S * 1000)) ] || ! kill -0 "$DOCKER_PID" 2>/dev/null; then
      echo "docker: the daemon did not answer within ${DOCKER_READY_S}s. Its log" \
           "($DOCKER_TMP/dockerd.log) ends:"
      tail -n 15 "$DOCKER_TMP/dockerd.log"
      docker_stop
      unset DOCKER_HOST
      return 1
    fi
    sleep 0.5
  done
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local version
  version="$(dockerd --version)"   # "Docker version 20.10.24+dfsg1, build 297e128"
  version="${version#Docker version }"
  echo "docker: started dockerd ${version%%,*} for this run:" \
       "answered after ${ms} ms (pid $DOCKER_PID, log $DOCKER_TMP/dockerd.log)"
  return "$compose_ok"
}

docker_stop() {
  [ -n "$DOCKER_TMP" ] || return 0
  local pid="$DOCKER_PID"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"  # dockerd stops its containers and its own containerd, then exits
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    wait "$pid" 2>/dev/null
  fi
  # The containerd that dockerd ran outlives a dockerd that had to be killed.
  pid="$(cat "$DOCKER_TMP/exec/containerd/containerd.pid" 2>/dev/null)"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && kill -TERM "$pid"
  # Anything still mounted under the data root (an overlay of a killed daemon) goes before the dir.
  grep -o " $DOCKER_TMP/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
  rm -rf "$DOCKER_TMP"
  DOCKER_TMP="" DOCKER_PID=""
  echo "docker: stopped the run's dockerd"
}
