# A Docker daemon for the container tests (tests/unit/runtime/test_container.py), sourced by
# scripts/test.sh: `docker_start` before pytest, `docker_stop` on EXIT.
#
# A daemon that already answers is used as it is. Otherwise, as root, this starts a private one for
# the run: its own data root, exec root, socket, pidfile and log under a temp dir (so it touches no
# daemon or image store of the machine), DOCKER_HOST pointing at it; `docker_stop` stops it by the
# pid in its pidfile and removes the dir. When dockerd is missing and this is root on Debian,
# Debian's docker.io package is installed first (as scripts/setup_browser.sh installs Chromium).
# Anywhere else nothing happens and the container tests skip with their own message.

DOCKER_TMP=""
DOCKER_PID=""
DOCKER_READY_S="${DOCKER_READY_S:-60}"

_docker_answers() { command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; }

_docker_install() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "docker: dockerd is missing and installing it needs root and apt-get; container tests will skip"
    return 1
  fi
  if ! apt-cache policy docker.io 2>/dev/null | grep -q "Candidate: [0-9]"; then
    echo "docker: no docker.io package in this machine's apt sources; container tests will skip"
    return 1
  fi
  echo "docker: installing Debian's docker.io (dockerd, containerd, runc)..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
         apt-get install -y -q --no-install-recommends docker.io >/dev/null; }
}

docker_start() {
  if _docker_answers; then
    echo "docker: a daemon answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null)); using it"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "docker: no daemon answers and starting one needs root; container tests will skip"
    return 0
  fi
  command -v dockerd >/dev/null 2>&1 || _docker_install || return 0
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
      echo "docker: the daemon did not answer within ${DOCKER_READY_S}s; container tests will skip." \
           "Its log ($DOCKER_TMP/dockerd.log) ends:"
      tail -n 15 "$DOCKER_TMP/dockerd.log"
      docker_stop
      unset DOCKER_HOST
      return 0
    fi
    sleep 0.5
  done
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "docker: started dockerd $(dockerd --version | cut -d, -f1 | cut -d' ' -f3) for this run:" \
       "answered after ${ms} ms (pid $DOCKER_PID, log $DOCKER_TMP/dockerd.log)"
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
