#!/usr/bin/perl

# listen parameters real configs use: stream port ranges (nginx 1.15.10:
# one listening socket per port, each answering as its own port),
# rcvbuf= / sndbuf= (stream and http) seen on the listening socket with
# ss(8) (Linux reports twice the size asked, its bookkeeping share),
# so_keepalive= seen on accepted connections, and deferred, bind, fastopen=
# and ipv6only= accepted.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream http/)->plan(16);
my $d = $t->testdir();

# Three consecutive free ports, held until sluice starts.
my ($base, @held);
my ($lo, $hi) = Test::Sluice::_port_range();
for (1 .. 100) {
	my $p = $lo + int(rand($hi - $lo - 3));
	@held = map {
		IO::Socket::INET->new(LocalAddr => '127.0.0.1:' . ($p + $_), Listen => 1, ReuseAddr => 1)
	} 0 .. 2;
	if (3 == grep { defined } @held) {
		$base = $p;
		last;
	}
	@held = ();
}
die "no three free ports in a row\n" unless $base;
my $last = $base + 2;

(my $conf = <<'EOF') =~ s/RANGE/$base-$last/;

%%TEST_GLOBALS%%

events {
}

stream {
    server {
        listen 127.0.0.1:RANGE;
        return "port $server_port\n";
    }
    server {
        listen 127.0.0.1:%%PORT_8091%% rcvbuf=64k sndbuf=32k backlog=8;
        return "bufs\n";
    }
    server {
        listen 127.0.0.1:%%PORT_8092%% so_keepalive=on bind fastopen=4;
        # Waits for a ClientHello: holds the session for the look.
        ssl_preread on;
        preread_timeout 10s;
        return "tls\n";
    }
}

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8080%% rcvbuf=128k;
        location / { return 200 "http\n"; }
    }
    server {
        listen 127.0.0.1:%%PORT_8081%% so_keepalive=30m::10 deferred bind fastopen=16 ipv6only=on;
        location / { return 200 "ka\n"; }
    }
}

EOF
$t->write_file_expand('sluice.conf', $conf);
close $_ for @held;
$t->run();

sub answer {
	my ($port) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 5)
		or return "connect: $!";
	my ($r, $sel) = ('', IO::Select->new($s));
	while ($sel->can_read(3)) {
		$s->sysread($r, 4096, length $r) or last;
	}
	return $r;
}

is(answer($base), "port $base\n", 'first port of the range');
is(answer($base + 1), 'port ' . ($base + 1) . "\n", 'middle port of the range');
is(answer($last), "port $last\n", 'last port of the range');
is(answer(port(8091)), "bufs\n", 'a listener with rcvbuf= and sndbuf= serves');
like(http_get('/'), qr/^http$/m, 'an http listener with rcvbuf= serves');

# The listening sockets' buffers as ss(8) reports them.
sub skmem {
	my ($port) = @_;
	my $out = `ss -ltmn 'sport = :$port' 2>/dev/null`;
	return $out =~ /skmem:\(([^)]*)\)/ ? $1 : '';
}
# The accepted side of a connection to $port, as ss -o shows it (with $open,
# one is opened first and kept for the look).
my @keep;
sub accepted {
	my ($port, $open) = @_;
	push @keep, IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 5) if $open;
	select undef, undef, undef, 0.2 if $open;
	my ($line) = grep { /127\.0\.0\.1:$port\s/ }
		split /\n/, `ss -tno state established '( sport = :$port )' 2>/dev/null`;
	return $line // 'none';
}

SKIP: {
	skip 'no ss(8)', 7 unless `ss -V 2>/dev/null` =~ /\d/;
	like(skmem(port(8091)), qr/\brb131072\b/, 'stream rcvbuf=64k: SO_RCVBUF set');
	like(skmem(port(8091)), qr/\btb65536\b/, 'stream sndbuf=32k: SO_SNDBUF set');
	like(skmem(port(8080)), qr/\brb262144\b/, 'http rcvbuf=128k: SO_RCVBUF set');

	# so_keepalive: a client connection accepted there has a keepalive
	# timer, 30 minutes for http's 30m::10.
	my @c = map {
		IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port($_), Timeout => 5) or die "connect: $!";
	} (8081, 8092);
	select undef, undef, undef, 0.2;
	like(accepted(port(8081)), qr/timer:\(keepalive,(29|30)min/, 'http so_keepalive=30m::10');
	like(accepted(port(8092)), qr/timer:\(keepalive,/, 'stream so_keepalive=on');
	my $plain = accepted(port(8080), 1);
	like($plain, qr/127\.0\.0\.1:\d+\s+127\.0\.0\.1/, 'a connection without so_keepalive is there');
	unlike($plain, qr/keepalive/, 'without so_keepalive: no keepalive timer');
	close $_ for @c;
}

$t->stop();

# Config errors, with file:line.
sub conf_error {
	my ($listen) = @_;
	$t->write_file('bad.conf', "events {}\nstream {\nserver {\nlisten $listen;\nreturn x;\n}\n}\n");
	my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-e', 'stderr', '-t', '-c', "$d/bad.conf");
	return $rc ? $err : "exit 0: $err";
}
like(conf_error('127.0.0.1:9005-9001'), qr/invalid port range in "127\.0\.0\.1:9005-9001" in \S+bad\.conf:4/,
	'a range backwards is refused');
like(conf_error('127.0.0.1:9001 rcvbuf=lots'), qr/invalid rcvbuf "lots" in \S+bad\.conf:4/,
	'a bad rcvbuf is refused');
like(conf_error('127.0.0.1:9001 so_keepalive=1:2'), qr/invalid so_keepalive value: "so_keepalive=1:2" in \S+bad\.conf:4/,
	'a bad so_keepalive is refused');
like(conf_error('127.0.0.1:9001 deferred'), qr/invalid parameter "deferred" in \S+bad\.conf:4/,
	'deferred is http\'s only, as nginx');
