# Helpers shared by scripts/bench, scripts/cost, scripts/ab and
# scripts/release: sourced (`. "$(dirname "$0")/lib.sh"`), not run.

# A TCP port free on 127.0.0.1 now (the kernel's pick; a random one in
# 20000-39999 without python3).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' \
        2>/dev/null || echo $((20000 + RANDOM % 20000))
}

# Whether the binary to measure is scripts/release's and LLVM's BOLT, which
# its last step uses, is missing (Debian's bolt-19 has it).
bolt_wanted() {
    [ -z "${SLUICE_BENCH_BINARY:-}" ] && ! compgen -G '/usr/lib/llvm-*/bin/llvm-bolt' >/dev/null
}

# install_needed WHO PACKAGE...: installs the Debian packages with apt-get
# (as root); anyone else is told which to install, and the script ends.
install_needed() {
    local who=$1
    shift
    (($#)) || return 0
    if [ "$(id -u)" != 0 ]; then
        echo "$who: please install $*" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The sluice binary a measurement runs: $SLUICE_BENCH_BINARY, else the
# release build users install (`scripts/install --build`), with
# profile-guided optimization, built again when the sources changed.
measured_binary() {
    if [ -n "${SLUICE_BENCH_BINARY:-}" ]; then
        realpath "$SLUICE_BENCH_BINARY"
    else
        scripts/release
    fi
}

# The TCP connections this machine has opened so far (the kernel's
# ActiveOpens, /proc/net/snmp): over a run, less the load generator's own,
# what a proxy opened to its upstreams.
tcp_opens() {
    awk '$1 == "Tcp:" { if (!c) { for (i = 2; i <= NF; i++) if ($i == "ActiveOpens") c = i } else { print $c; exit } }' /proc/net/snmp
}
