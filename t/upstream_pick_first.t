#!/usr/bin/perl

# pick_first: every request goes to one peer, the first usable in server
# order; the choice lives in the zone, so both workers follow it. Failover
# on connection refused (with warm=1: an idle connection to the next peer is
# kept open; no client request fails while the chosen backend stops), on a
# timeout and on a 503 with proxy_next_upstream http_503; the new choice
# stays when the old peer comes back, and with revert traffic goes back to
# the first once it is usable again.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use Time::HiRes qw/time sleep/;
use JSON::PP qw/decode_json/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(20);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    log_format w "$pid $uri $status $upstream_addr";
    access_log %%TESTDIR%%/access.log w;

    upstream pf {
        zone pf 64k;
        pick_first;
        server 127.0.0.1:%%PORT_8081%% fail_timeout=1s;
        server 127.0.0.1:%%PORT_8082%% fail_timeout=1s;
        server 127.0.0.1:%%PORT_8083%% fail_timeout=1s;
    }
    upstream pfr {
        zone pfr 64k;
        pick_first revert warm=0;
        server 127.0.0.1:%%PORT_8084%% fail_timeout=1s;
        server 127.0.0.1:%%PORT_8085%% fail_timeout=1s;
    }
    upstream pf503 {
        zone pf503 64k;
        pick_first;
        server 127.0.0.1:%%PORT_8086%%;
        server 127.0.0.1:%%PORT_8083%%;
    }
    upstream pft {
        zone pft 64k;
        pick_first;
        server 127.0.0.1:%%PORT_8087%%;
        server 127.0.0.1:%%PORT_8083%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /pf/ { proxy_pass http://pf; }
        location /pfr/ { proxy_pass http://pfr; }
        location /pf503/ {
            proxy_pass http://pf503;
            proxy_next_upstream error timeout http_503;
        }
        location /pft/ {
            proxy_pass http://pft;
            proxy_read_timeout 500ms;
        }
        location /api/ { api; }
    }
}

EOF

$t->backend(port($_)) for 8081 .. 8085;
$t->backend(port(8086), status => 503);
$t->backend(port(8087), delay => 5);
$t->run();

sub port_of { my ($p) = ($_[0] // '') =~ /^X-Port: (\d+)/mi; $p // 'none' }

# $n requests on $n connections opened at once (both workers accept some),
# $rounds times: counts by answering port.
sub bursts {
	my ($path, $n, $rounds) = @_;
	my %by;
	for (1 .. $rounds) {
		my @s = map { http_get($path, start => 1) } 1 .. $n;
		$by{port_of(http_end($_))}++ for grep { defined } @s;
	}
	return \%by;
}

sub only { my ($by) = @_; join ',', map { "$_=$by->{$_}" } sort keys %$by }

sub api {
	my $r = http_get("/api/9/http/upstreams/$_[0]") // '';
	my ($body) = $r =~ /\r\n\r\n(.*)/s;
	return eval { decode_json($body // '') } // {};
}

sub choice { api($_[0])->{sluice}{pick_first} // 'none' }

# A peer of upstream $u by its port.
sub peer {
	my ($u, $port) = @_;
	my ($p) = grep { $_->{server} eq "127.0.0.1:$port" } @{api($u)->{peers} // []};
	return $p // {};
}

# Both workers follow one choice: the first server.
my $first = bursts('/pf/x', 6, 4);
is(only($first), port(8081) . '=24', 'every request to the first server');
my %pids = map { (split)[0] => 1 } grep { m! /pf/x ! } split /\n/, $t->read_file('access.log');
is(scalar(keys %pids), 2, 'both workers served');
is(choice('pf'), '127.0.0.1:' . port(8081), 'api: the choice');

# warm=1 (the default): an idle connection to the next server.
ok(poll_until(sub { (peer('pf', port(8082))->{sluice}{idle} // 0) >= 1 }, 3),
	'warm: an idle connection to the next server');

# The chosen backend stops while a client keeps sending: none fails.
my $log = $t->testdir() . '/load.txt';
my $pid = fork() // die "fork: $!";
if ($pid == 0) {
	my (%by, $n);
	my $until = time() + 1.5;
	while (time() < $until) {
		my $r = http_get('/pf/x') // '';
		my ($st) = $r =~ /^HTTP\/1\.1 (\d+)/;
		$by{$st // 'none'}++;
		$n++;
	}
	open my $fh, '>', $log or POSIX::_exit(1);
	print $fh join(' ', map { "$_=$by{$_}" } sort keys %by), "\n";
	close $fh;
	POSIX::_exit(0);
}
sleep 0.5;
$t->stop_backend(port(8081));
waitpid($pid, 0);
like($t->read_file('load.txt'), qr/^200=\d+\n$/, 'chosen backend stopped under load: no request failed');
is(choice('pf'), '127.0.0.1:' . port(8082), 'the choice moved to the next server');

# It comes back; after its fail_timeout the choice stays where it is.
$t->backend(port(8081));
sleep 1.2;
my $after = bursts('/pf/x', 6, 3);
is(only($after), port(8082) . '=18', 'stable: no flapping back when the first returns');

# The second fails too: the third, not back to the first.
$t->stop_backend(port(8082));
is(port_of(http_get('/pf/x')), port(8083), 'failover moves forward in server order');
$t->backend(port(8082));

# revert: back to the first once it is usable again.
is(port_of(http_get('/pfr/x')), port(8084), 'revert: the first server');
$t->stop_backend(port(8084));
is(port_of(http_get('/pfr/x')), port(8085), 'revert: failover');
$t->backend(port(8084));
is(port_of(http_get('/pfr/x')), port(8085), 'revert: not before its fail_timeout');
ok(poll_until(sub { port_of(http_get('/pfr/x')) eq port(8084) }, 3), 'revert: back to the first');

# A 503 with proxy_next_upstream http_503 moves the choice.
is(port_of(http_get('/pf503/x')), port(8083), '503: answered by the next');
http_get('/pf503/x') for 1 .. 5;
is(peer('pf503', port(8086))->{requests}, 1, '503: the failed server is not asked again');
is(choice('pf503'), '127.0.0.1:' . port(8083), '503: the choice moved');

# A timeout (proxy_read_timeout) moves it as well.
is(port_of(http_get('/pft/x')), port(8083), 'timeout: answered by the next');
my $start = time();
http_get('/pft/x') for 1 .. 3;
ok(time() - $start < 1.5, 'timeout: later requests go to the next at once');

# A reload keeps the choice (the new zone starts from the old one's).
ok($t->reload(), 'reload');
is(choice('pf'), '127.0.0.1:' . port(8083), 'reload: the choice carried over');
is(port_of(http_get('/pf/x')), port(8083), 'reload: requests stay with it');
