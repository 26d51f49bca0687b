package Test::Sluice;

# Test harness for sluice in the style of nginx-tests: a test writes its config
# inline, starts the real binary in a private directory, talks to it over
# loopback and stops it. Ports are probed and held until the binary starts.
# Every plan gets one more test: error.log has no [alert], [crit] or [emerg]
# lines other than those the test said it expects. Core Perl modules only.
#
# Knobs: SLUICE_BINARY (the binary), TEST_SLUICE_LEAVE (keep the directory),
# TEST_SLUICE_VERBOSE (show the binary's stderr and commands),
# TEST_SLUICE_CATLOG (print error.log at the end).

use warnings;
use strict;

use Test::More ();
use File::Temp ();
use File::Spec ();
use File::Basename qw/dirname/;
use Cwd qw/abs_path/;
use IO::Socket::INET;
use IO::Select;
use IO::Socket::UNIX;
use POSIX qw/:sys_wait_h/;
use Time::HiRes qw/sleep time/;
use Socket qw/SOCK_STREAM SOCK_DGRAM/;

use Exporter qw/import/;
our @EXPORT_OK = qw/http http_get http_start http_end port closed_within
	backend_addr poll_until keepalive_get pids_answering rss_kb random_chunks
	dechunk upstream_peer peer_state_is/;
our %EXPORT_TAGS = (all => \@EXPORT_OK);

my $ROOT = abs_path(dirname(__FILE__) . '/../../..');
our $BINARY = $ENV{SLUICE_BINARY} || "$ROOT/target/debug/sluice";

# A write to a connection sluice closed (a flood cut short, a refused
# request) returns EPIPE instead of killing the test with SIGPIPE, which
# would leave its sluice and backends running and prove waiting on them.
$SIG{PIPE} = 'IGNORE';

my %PORTS;          # placeholder number => port
my %HELD;           # placeholder number => socket holding the port
my @INSTANCES;

sub new {
	my ($class) = @_;
	my $self = bless {}, $class;
	$self->{_testdir} = File::Temp::tempdir('sluice-test-XXXXXXXXXX',
		TMPDIR => 1, CLEANUP => !$ENV{TEST_SLUICE_LEAVE});
	# Workers drop to an unprivileged user: they must reach their files.
	chmod(0755, $self->{_testdir}) or die "can't chmod test dir: $!\n";
	# The default access log is logs/access.log under the prefix.
	mkdir("$self->{_testdir}/logs") or die "can't create logs dir: $!\n";
	$self->{_daemons} = [];
	$self->{_expected} = [];
	$self->{_owner} = $$;
	push @INSTANCES, $self;
	Test::More::diag("testdir $self->{_testdir}") if $ENV{TEST_SLUICE_LEAVE};
	return $self;
}

sub testdir { $_[0]->{_testdir} }
sub binary { $BINARY }

# Skips the file unless `-V` claims every named module. Names are nginx's:
# http, rewrite, proxy, stream, upstream_zone, realip ...
sub has {
	my ($self, @features) = @_;
	my $v = `$BINARY -V 2>&1`;
	for my $f (@features) {
		my $ok;
		if ($f eq 'http') {
			$ok = $v !~ /--without-http(?:\s|$)/m;
		} elsif ($f eq 'stream' || $f eq 'realip' || $f eq 'http_realip') {
			my $m = $f eq 'stream' ? 'stream' : 'http_realip_module';
			$ok = $v =~ /--with-\Q$m\E(?:\s|$|=dynamic)/m;
		} else {
			(my $m = $f) =~ s/^http_//;
			$m = "http_${m}_module" unless $m =~ /_module$/;
			$ok = $v !~ /--without-\Q$m\E\b/;
		}
		unless ($ok) {
			Test::More::plan(skip_all => "no $f");
		}
	}
	return $self;
}

sub plan {
	my ($self, $n) = @_;
	Test::More::plan(tests => $n + 1);
	$self->{_planned} = 1;
	return $self;
}

# Patterns of [alert]/[crit]/[emerg] lines the test causes on purpose.
sub expect_errors {
	my ($self, @re) = @_;
	push @{$self->{_expected}}, @re;
	return $self;
}

sub port {
	my ($num, %opts) = @_;
	$num = $_[1] if ref $num;
	my $udp = $opts{udp};
	my $key = $udp ? "${num}_udp" : $num;
	return $PORTS{$key} if defined $PORTS{$key};
	my ($lo, $hi) = _port_range();
	for (1 .. 100) {
		my $port = $lo + int(rand($hi - $lo));
		my $s = IO::Socket::INET->new(
			Proto => $udp ? 'udp' : 'tcp',
			LocalAddr => "127.0.0.1:$port",
			$udp ? () : (Listen => 1, ReuseAddr => 1),
		) or next;
		# The same port must be free for the other protocol and on ::1 too.
		my $other = IO::Socket::INET->new(
			Proto => $udp ? 'tcp' : 'udp',
			LocalAddr => "127.0.0.1:$port") or next;
		close $other;
		$HELD{$key} = $s;
		return $PORTS{$key} = $port;
	}
	die "no free port\n";
}

# Where test ports are picked: below the kernel's ephemeral range, so that a
# port released for a backend to bind (`_release_ports`) is not taken in the
# meantime as the source port of some client's connection (a fresh-clone CI
# run saw `blackhole 57084: Address already in use`). Falls back to
# 10000-60000 when that leaves too few ports.
my @RANGE;
sub _port_range {
	return @RANGE if @RANGE;
	my $eph;
	if (open my $fh, '<', '/proc/sys/net/ipv4/ip_local_port_range') {
		($eph) = (<$fh> // '') =~ /^(\d+)/;
		close $fh;
	}
	@RANGE = defined $eph && $eph - 10000 >= 5000 ? (10000, $eph) : (10000, 60000);
	return @RANGE;
}

sub _release_ports {
	for my $k (keys %HELD) {
		close $HELD{$k};
		delete $HELD{$k};
	}
}

sub test_globals {
	my ($self) = @_;
	my $d = $self->{_testdir};
	return "pid $d/sluice.pid;\nerror_log $d/error.log debug;\ndaemon off;\n";
}

sub _expand {
	my ($self, $content) = @_;
	my $g = $self->test_globals();
	$content =~ s/%%TEST_GLOBALS%%/$g/g;
	$content =~ s/%%TEST_GLOBALS_HTTP%%//g;
	$content =~ s/%%TEST_GLOBALS_STREAM%%//g;
	$content =~ s/%%TESTDIR%%/$self->{_testdir}/g;
	$content =~ s/%%PORT_(\d+)_UDP%%/port($1, udp => 1)/ge;
	$content =~ s/%%PORT_(\d+)%%/port($1)/ge;
	return $content;
}

sub write_file {
	my ($self, $name, $content) = @_;
	my $path = "$self->{_testdir}/$name";
	open my $fh, '>', $path or die "can't write $path: $!\n";
	binmode $fh;
	print $fh $content;
	close $fh;
	return $self;
}

sub write_file_expand {
	my ($self, $name, $content) = @_;
	return $self->write_file($name, $self->_expand($content));
}

sub read_file {
	my ($self, $name) = @_;
	my $path = $name =~ m{^/} ? $name : "$self->{_testdir}/$name";
	open my $fh, '<', $path or return '';
	local $/;
	my $c = <$fh>;
	close $fh;
	return $c // '';
}

sub pid_file { "$_[0]->{_testdir}/sluice.pid" }

# The master's pid from the pid file (the config may name another file).
sub master_pid {
	my ($self) = @_;
	my $p = $self->read_file($self->{_pid_file} // $self->pid_file);
	chomp $p;
	return $p =~ /^\d+$/ ? $p : undef;
}

# Runs the binary with arguments, returns (exit code, stdout, stderr).
sub run_binary {
	my ($self, @args) = @_;
	_release_ports();
	my $d = $self->{_testdir};
	my ($out, $err) = ("$d/.out", "$d/.err");
	my $pid = fork() // die "fork: $!\n";
	if ($pid == 0) {
		open STDOUT, '>', $out or die;
		open STDERR, '>', $err or die;
		exec($BINARY, @args) or die "exec $BINARY: $!\n";
	}
	waitpid($pid, 0);
	my $code = $? >> 8;
	return ($code, $self->read_file($out), $self->read_file($err));
}

sub run {
	my ($self, %opts) = @_;
	my $d = $self->{_testdir};
	my $conf = $opts{conf} // 'sluice.conf';
	$self->{_pid_file} = $opts{pid_file} if $opts{pid_file};
	unlink($self->{_pid_file} // $self->pid_file);
	_release_ports();
	my @args = ('-p', "$d/", '-c', $conf, '-e', 'error.log', @{$opts{args} // []});
	Test::More::diag("$BINARY @args") if $ENV{TEST_SLUICE_VERBOSE};
	my $pid = fork() // die "fork: $!\n";
	if ($pid == 0) {
		unless ($ENV{TEST_SLUICE_VERBOSE}) {
			open STDERR, '>>', "$d/stderr.log";
		}
		open STDOUT, '>', '/dev/null';
		exec($BINARY, @args) or die "exec $BINARY: $!\n";
	}
	$self->{_child} = $pid;
	my $pf = $self->{_pid_file} // $self->pid_file;
	unless ($self->waitforfile($pf, $pid)) {
		# A daemonizing start exits 0 once the file exists; anything else failed.
		die "can't start sluice\n" unless -e $pf;
	}
	# The file is made, then written (as nginx writes its own): a read in
	# between finds it empty.
	my $mp;
	for (1 .. 40) {
		last if $mp = $self->master_pid();
		sleep 0.05;
	}
	unless ($mp) {
		# Stopped at the end as a started one is, not left running.
		$self->{_master} = $pid if kill(0, $pid);
		die "no pid in $pf\n";
	}
	$self->{_master} = $mp;
	$self->{_started} = 1;
	return $self;
}

sub try_run {
	my ($self, $message) = @_;
	eval { $self->run(); };
	if ($@) {
		Test::More::plan(skip_all => "$message: $@");
	}
	return $self;
}

sub master { $_[0]->{_master} }

# Sends a signal to the master, by the pid we started (or read from its file).
sub signal {
	my ($self, $sig) = @_;
	# A reload may bind ports the test probed since the start.
	_release_ports();
	my $pid = $self->{_master} or return 0;
	return kill($sig, $pid);
}

sub _alive {
	my ($pid) = @_;
	return 0 unless $pid;
	if ($_[1] && $_[1] == $pid) {
		return waitpid($pid, WNOHANG) == 0;
	}
	return kill(0, $pid);
}

# Waits up to $secs for the master to exit; true if it did.
sub wait_exit {
	my ($self, $secs) = @_;
	my $pid = $self->{_master} or return 1;
	for (1 .. ($secs // 10) * 20) {
		my $gone;
		if ($self->{_child} && $self->{_child} == $pid) {
			my $r = waitpid($pid, WNOHANG);
			$gone = $r == $pid || $r == -1;
			$self->{_exit_status} = $? if $r == $pid;
		} else {
			$gone = !kill(0, $pid);
		}
		if ($gone) {
			delete $self->{_master};
			return 1;
		}
		sleep 0.05;
	}
	return 0;
}

sub stop {
	my ($self) = @_;
	return $self unless $self->{_master};
	$self->signal('QUIT');
	unless ($self->wait_exit(15)) {
		$self->signal('TERM');
		unless ($self->wait_exit(5)) {
			$self->signal('KILL');
			$self->wait_exit(5);
		}
	}
	# Reap a daemonizing parent too.
	waitpid($self->{_child}, WNOHANG) if $self->{_child};
	return $self;
}

# HUP, then wait until the new generation has started (true) or not (false).
sub reload {
	my ($self, $secs) = @_;
	my $before = () = $self->read_file('error.log') =~ /start worker processes/g;
	$self->signal('HUP');
	return $self->waitforlog(sub {
		my $n = () = $_[0] =~ /start worker processes/g;
		$n > $before;
	}, $secs // 5);
}

# Waits (up to $secs, default 5) until the master has logged every one of
# these worker pids as exited with code 0; true if it has.
sub waitforexit {
	my ($self, $pids, $secs) = @_;
	return $self->waitforlog(sub {
		my $log = shift;
		!grep { $log !~ /worker process $_ exited with code 0/ } @$pids;
	}, $secs);
}

# Polls error.log until the regex (or code ref) matches; true if it did.
sub waitforlog {
	my ($self, $what, $secs, $file) = @_;
	$file //= 'error.log';
	for (1 .. ($secs // 5) * 20) {
		my $log = $self->read_file($file);
		return 1 if ref $what eq 'CODE' ? $what->($log) : $log =~ $what;
		sleep 0.05;
	}
	return 0;
}

sub log_count {
	my ($self, $re, $file) = @_;
	my $n = () = $self->read_file($file // 'error.log') =~ /$re/g;
	return $n;
}

sub waitforfile {
	my ($self, $file, $pid) = @_;
	for (1 .. 100) {
		return 1 if -e $file;
		if ($pid) {
			my $r = waitpid($pid, WNOHANG);
			return -e $file ? 1 : 0 if $r == $pid;
		}
		sleep 0.05;
	}
	return 0;
}

sub waitforsocket {
	my ($self, $peer) = @_;
	for (1 .. 100) {
		my $s = IO::Socket::INET->new(Proto => 'tcp', PeerAddr => $peer);
		return 1 if $s;
		sleep 0.05;
	}
	return 0;
}

# Runs a helper (a code ref, or a program and its arguments) in the background.
sub run_daemon {
	my ($self, $code, @args) = @_;
	my $pid = fork() // die "fork: $!\n";
	if ($pid == 0) {
		if (ref $code eq 'CODE') {
			$code->(@args);
			POSIX::_exit(0);
		}
		exec($code, @args) or POSIX::_exit(127);
	}
	push @{$self->{_daemons}}, $pid;
	return $self;
}

# Starts a test backend (Test::Sluice::Backend) on 127.0.0.1:port and waits
# until it accepts connections.
sub backend {
	my ($self, $port, %opts) = @_;
	require Test::Sluice::Backend;
	_release_ports();
	# Readiness by a file, not by connecting: a probe would count as a connection.
	my $ready = "$self->{_testdir}/backend_" . ($opts{addr} // '127.0.0.1') . "_$port.ready";
	unlink $ready;
	$self->run_daemon(\&Test::Sluice::Backend::run, $port, %opts, ready => $ready);
	$self->{_backends}{($opts{addr} // '127.0.0.1') . ":$port"} = $self->{_daemons}[-1];
	$self->waitforfile($ready) or die "backend $port did not start\n";
	return $self;
}

# Starts a FastCGI responder (Test::Sluice::FastCGI) on 127.0.0.1:port (or a
# unix socket, a path) and waits until it accepts connections.
sub fastcgi {
	my ($self, $port) = @_;
	require Test::Sluice::FastCGI;
	_release_ports();
	(my $name = $port) =~ s![/.]!_!g;
	my $ready = "$self->{_testdir}/fastcgi_$name.ready";
	unlink $ready;
	$self->run_daemon(\&Test::Sluice::FastCGI::run, $port, ready => $ready);
	$self->{_backends}{$port =~ m{^/} ? $port : "127.0.0.1:$port"} = $self->{_daemons}[-1];
	$self->waitforfile($ready) or die "fastcgi $port did not start\n";
	return $self;
}

# Starts a scripted raw backend (Test::Sluice::Raw) on 127.0.0.1:port: each
# request path gets the bytes %script names. What it received is logged, one
# line a request ("CONN METHOD URI BODY_LENGTH"), in raw_PORT.log in the test
# directory: read it with raw_log(port).
sub raw_backend {
	my ($self, $port, %script) = @_;
	require Test::Sluice::Raw;
	_release_ports();
	my $ready = "$self->{_testdir}/raw_$port.ready";
	unlink $ready;
	$self->run_daemon(\&Test::Sluice::Raw::run, $port, script => \%script,
		log => "$self->{_testdir}/raw_$port.log", ready => $ready);
	$self->{_backends}{"127.0.0.1:$port"} = $self->{_daemons}[-1];
	$self->waitforfile($ready) or die "raw backend $port did not start\n";
	return $self;
}

# A raw backend (Test::Sluice::Raw) on 127.0.0.1:port whose answers $answer
# makes (a code ref given the request's method, target and head), for
# fuzzing: its random numbers are seeded from the test's, so that a seeded
# test replays them. Nothing is logged (a long run would fill the disk).
sub random_backend {
	my ($self, $port, $answer) = @_;
	require Test::Sluice::Raw;
	_release_ports();
	my $ready = "$self->{_testdir}/raw_$port.ready";
	unlink $ready;
	my $seed = int(rand(1 << 31));
	$self->run_daemon(sub { srand($seed); Test::Sluice::Raw::run(@_) }, $port,
		script => $answer, ready => $ready);
	$self->{_backends}{"127.0.0.1:$port"} = $self->{_daemons}[-1];
	$self->waitforfile($ready) or die "raw backend $port did not start\n";
	return $self;
}

# The API's object for peer 127.0.0.1:$p of upstream $u (an HTTP one, or
# a stream one when $kind is 'stream'), asked on port $api (port(8080)
# unless given); { state => '' } when there is none (or no answer).
sub upstream_peer {
	my ($u, $p, $api, $kind) = @_;
	$kind //= 'http';
	my $r = http_get("/api/9/$kind/upstreams/$u",
		PeerAddr => '127.0.0.1:' . ($api // port(8080))) // '';
	my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
	require JSON::PP;
	my $j = eval { JSON::PP->new->decode($body // '') } or return { state => '' };
	my ($peer) = grep { $_->{server} eq "127.0.0.1:$p" } @{$j->{peers} // []};
	return $peer // { state => '' };
}

# Polls (6 s) until that peer is in state $want; 'up' only once a health
# check ran.
sub peer_state_is {
	my ($u, $p, $want, $api) = @_;
	return poll_until(sub {
		my $j = upstream_peer($u, $p, $api);
		($j->{state} // '') eq $want && ($want ne 'up' || ($j->{health_checks}{checks} // 0) > 0);
	}, 6);
}

# The data of a chunked body (what follows its head), its trailers left out.
sub dechunk {
	my ($b) = @_;
	my $out = '';
	while ($b =~ s/^([0-9a-f]+)[^\r]*\r\n//i) {
		my $n = hex $1;
		last if $n == 0;
		$out .= substr($b, 0, $n, '');
		$b =~ s/^\r\n//;
	}
	return $out;
}

# $body cut into chunks of random sizes as chunked coding writes them, the
# last (empty) chunk not included; with ext => P, a chunk carries an
# extension with probability P.
sub random_chunks {
	my ($body, %opts) = @_;
	my $w = '';
	while (length $body) {
		my $n = 1 + int(rand(length $body));
		my $ext = $opts{ext} && rand() < $opts{ext} ? ';ext=1' : '';
		$w .= sprintf('%x', $n) . "$ext\r\n" . substr($body, 0, $n, '') . "\r\n";
	}
	return $w;
}

# The resident memory of process $pid in kB (0 once it is gone).
sub rss_kb {
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/status" or return 0;
	my ($kb) = join('', <$fh>) =~ /^VmRSS:\s+(\d+) kB/m;
	return $kb // 0;
}

# The requests the raw backend on port received so far, as
# [conn, method, uri, body_length] lists.
sub raw_log {
	my ($self, $port) = @_;
	open my $fh, '<', "$self->{_testdir}/raw_$port.log" or return ();
	return map { chomp; [split / /] } <$fh>;
}

# Every byte the raw backend on port has read so far, from all connections,
# complete requests or not.
sub raw_bytes {
	my ($self, $port) = @_;
	return $self->read_file("raw_$port.log.bytes");
}

# The requests the raw backend on port answered so far, each as the bytes it
# received (head and Content-Length body).
sub raw_requests {
	my ($self, $port) = @_;
	my $all = $self->read_file("raw_$port.log.requests");
	my @r;
	while ($all =~ s/^(\d+)\n//) {
		push @r, substr($all, 0, $1, '');
	}
	return @r;
}

# A listener on 127.0.0.1:port (or addr => IP) that never accepts, its queue filled by
# connections the harness holds: Linux drops further SYNs to it, as a dead
# host would (connecting hangs until the connect timeout). Kept until the
# test object goes.
sub blackhole {
	my ($self, $port, %opts) = @_;
	my $addr = $opts{addr} // '127.0.0.1';
	_release_ports();
	my $l = IO::Socket::INET->new(LocalAddr => "$addr:$port", Listen => 0, ReuseAddr => 1)
		or die "blackhole $port: $!\n";
	my @fill = ($l);
	for (1 .. 8) {
		push @fill, IO::Socket::INET->new(PeerAddr => "$addr:$port", Blocking => 0) // last;
	}
	push @{$self->{_blackholes}}, \@fill;
	return $self;
}

# Stops the backend started on 127.0.0.1:port (or addr => IP), by its pid,
# and waits until it has exited: its listener and connections are closed.
sub stop_backend {
	my ($self, $port, %opts) = @_;
	my $pid = delete $self->{_backends}{($opts{addr} // '127.0.0.1') . ":$port"} or return;
	kill 'KILL', $pid;
	waitpid($pid, 0);
	$self->{_daemons} = [grep { $_ != $pid } @{$self->{_daemons}}];
	return $self;
}

# dnsmasq on 127.0.0.1:$port answering for *.test from `hosts` in the test
# directory (re-read on HUP, to the pid this returns), nothing else. Returns
# undef when dnsmasq is not installed.
sub dnsmasq {
	my ($self, $port) = @_;
	my ($bin) = grep { -x } map { "$_/dnsmasq" } split(/:/, $ENV{PATH} // ''), '/usr/sbin', '/sbin';
	return undef unless $bin;
	_release_ports();
	my $d = $self->{_testdir};
	open my $fh, '>>', "$d/hosts" or die "hosts: $!\n";
	close $fh;
	my $pid = fork() // die "fork: $!\n";
	if ($pid == 0) {
		open STDERR, '>', "$d/dnsmasq.log";
		exec($bin, '--no-daemon', '--user=root', "--port=$port", '--listen-address=127.0.0.1',
			'--bind-interfaces', '--no-resolv', '--no-hosts', "--addn-hosts=$d/hosts",
			'--local=/test/', '--local-ttl=1', '--cache-size=0') or POSIX::_exit(127);
	}
	push @{$self->{_daemons}}, $pid;
	# Ready once it logs that it read the hosts file.
	for (1 .. 100) {
		last if $self->read_file('dnsmasq.log') =~ /read \Q$d\E\/hosts/;
		select(undef, undef, undef, 0.05);
	}
	return $pid;
}

# A DNS server on 127.0.0.1:$port (UDP, and TCP for truncated answers) that
# answers from the file `dns.txt` in the test directory, re-read for every
# query, and appends each question to `dns.log`. See Test::Sluice::DNS.
sub dns {
	my ($self, $port, %opts) = @_;
	require Test::Sluice::DNS;
	_release_ports();
	my $ready = "$self->{_testdir}/dns_$port.ready";
	$self->run_daemon(\&Test::Sluice::DNS::run, $port,
		answers => "$self->{_testdir}/dns.txt",
		log => "$self->{_testdir}/dns.log", %opts, ready => $ready);
	$self->waitforfile($ready) or die "dns $port did not start\n";
	return $self;
}

sub stop_daemons {
	my ($self) = @_;
	for my $pid (@{$self->{_daemons}}) {
		kill 'TERM', $pid;
	}
	for my $pid (@{$self->{_daemons}}) {
		for (1 .. 100) {
			last if waitpid($pid, WNOHANG) != 0;
			sleep 0.05;
		}
		kill 'KILL', $pid;
		waitpid($pid, 0);
	}
	$self->{_daemons} = [];
	return $self;
}

# The workers of the master: pids whose parent is the master.
sub worker_pids {
	my ($self) = @_;
	my $m = $self->{_master} or return ();
	my @pids;
	opendir my $dh, '/proc' or return ();
	for my $p (grep { /^\d+$/ } readdir $dh) {
		open my $fh, '<', "/proc/$p/stat" or next;
		my $stat = <$fh> // '';
		close $fh;
		# pid (comm) state ppid ...
		push @pids, $p if $stat =~ /\)\s+\S+\s+(\d+)/ && $1 == $m;
	}
	closedir $dh;
	return sort { $a <=> $b } @pids;
}

# CPU time of process $pid, user and system, in clock ticks (0 once it is
# gone).
sub cpu_ticks {
	my ($self, $pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my $stat = <$fh> // '';
	close $fh;
	# After "pid (comm) ": state is field 3, utime 14 and stime 15.
	my @f = split ' ', ($stat =~ /\)\s+(.*)/ ? $1 : '');
	return ($f[11] // 0) + ($f[12] // 0);
}

# The workers once at least $n (default 1) have started: the pid file is
# written before the master forks them, so worker_pids() right after run()
# may see none yet. Waits up to 5 s.
sub started_workers {
	my ($self, $n) = @_;
	$n //= 1;
	my @w;
	for (1 .. 100) {
		@w = $self->worker_pids();
		last if @w >= $n;
		select(undef, undef, undef, 0.05);
	}
	return @w;
}

sub _check_alerts {
	my ($self) = @_;
	my @lines = $self->read_file('error.log') =~ /^.*\[(?:alert|crit|emerg)\].*$/mg;
	my @bad;
	LINE: for my $l (@lines) {
		for my $re (@{$self->{_expected}}) {
			next LINE if $l =~ $re;
		}
		push @bad, $l;
	}
	Test::More::is(join("\n", @bad), '', 'no alerts');
}

sub DESTROY {}

# An interrupted test still stops what it started (END runs on exit()).
$SIG{INT} = $SIG{TERM} = sub { exit 1 };

END {
	my $status = $?;
	for my $t (@INSTANCES) {
		next unless $t->{_owner} == $$;
		$t->stop();
		$t->stop_daemons();
		if ($ENV{TEST_SLUICE_CATLOG}) {
			Test::More::diag($t->read_file('error.log'));
		}
		$t->_check_alerts() if $t->{_planned};
	}
	@INSTANCES = ();
	$? = $status;
}

###############################################################################
# HTTP helpers

sub http_get {
	my ($url, %extra) = @_;
	return http(<<EOF, %extra);
GET $url HTTP/1.0
Host: localhost

EOF
}

# Sends a raw request (LF line ends become CRLF) and returns the raw response.
# Options: PeerAddr (default 127.0.0.1:port(8080)), socket, start (return the
# socket after sending), body (sent after the head), sleep (before body).
sub http {
	my ($request, %extra) = @_;
	my $s = http_start($request, %extra) or return undef;
	return $s if $extra{start};
	return http_end($s, %extra);
}

sub http_start {
	my ($request, %extra) = @_;
	$request =~ s/(?<!\r)\n/\r\n/g unless $extra{raw};
	my $s = $extra{socket} || _connect(%extra) or return undef;
	local $SIG{PIPE} = 'IGNORE';
	eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		alarm($extra{timeout} // 8);
		$s->syswrite($request);
		if (defined $extra{body}) {
			sleep $extra{sleep} if $extra{sleep};
			$s->syswrite($extra{body});
		}
		alarm(0);
	};
	alarm(0);
	return $s;
}

sub _connect {
	my (%extra) = @_;
	if (my $path = $extra{unix}) {
		return IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $path);
	}
	return IO::Socket::INET->new(
		Proto => 'tcp',
		PeerAddr => $extra{PeerAddr} // ('127.0.0.1:' . port(8080)),
		Timeout => 5,
	);
}

sub http_end {
	my ($s, %extra) = @_;
	my $reply = '';
	eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		alarm($extra{timeout} // 8);
		while (1) {
			my $n = $s->sysread(my $buf, 65536);
			last unless $n;
			$reply .= $buf;
		}
		alarm(0);
	};
	alarm(0);
	close $s;
	return $reply;
}

# Sends GET $uri on the open connection $s and reads one response
# (Content-Length framed), leaving the connection open.
sub keepalive_get {
	my ($s, $uri) = @_;
	$s->syswrite("GET $uri HTTP/1.1\r\nHost: localhost\r\n\r\n");
	my $buf = '';
	my $sel = IO::Select->new($s);
	while ($sel->can_read(3)) {
		my $n = $s->sysread($buf, 4096, length $buf) or last;
		last if $buf =~ /\r\n\r\n/ && $buf =~ /Content-Length: (\d+)/i
			&& length($buf) >= index($buf, "\r\n\r\n") + 4 + $1;
	}
	return $buf;
}

# Opens $n connections to 127.0.0.1:$port one after another, 20 ms apart,
# each kept open after $ask->($socket) read its answer; then closes them all.
# How many answers named each pid ("pid N"; 'none' for an answer without).
sub pids_answering {
	my ($port, $n, $ask) = @_;
	my (%pids, @open);
	for (1 .. $n) {
		my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Proto => 'tcp', Timeout => 5)
			or next;
		my $r = $ask->($s) // '';
		$pids{$r =~ /pid (\d+)/ ? $1 : 'none'}++;
		push @open, $s;
		sleep(0.02);
	}
	close $_ for @open;
	return %pids;
}

# True when the peer closes $s within $secs seconds (EOF, no data).
sub closed_within {
	my ($s, $secs) = @_;
	my $sel = IO::Select->new($s);
	return 0 unless $sel->can_read($secs);
	return !$s->sysread(my $b, 1);
}

# Which backend answered GET $uri: the X-Addr a Test::Sluice::Backend with
# `addr` sends, 127.0.0.1 for one without, 'down' for a 502, 'error' else.
sub backend_addr {
	my ($uri) = @_;
	my $r = http_get($uri) // '';
	return 'down' if $r =~ /^HTTP\/1.1 502/;
	my ($a) = $r =~ /^X-Addr: (\S+)/mi;
	return $r =~ /^HTTP\/1.1 200/ ? ($a // '127.0.0.1') : 'error';
}

# Calls $code every 0.1 s until it returns true (true) or $secs pass (false).
sub poll_until {
	my ($code, $secs) = @_;
	for (1 .. ($secs // 6) * 10) {
		return 1 if $code->();
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

1;
