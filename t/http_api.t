#!/usr/bin/perl

# The read-only API (NGINX Plus shape) and stub_status, with two workers:
# per-peer counters after known traffic add up across workers, states (up,
# down, unavail), backup, max_conns, the zone figures under "sluice", error
# answers; stub_status's text. A worker killed with SIGKILL during load is
# respawned, the zone stays usable and the API still answers.

use warnings;
use strict;

use Test::More;
use JSON::PP;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(27);
$t->expect_errors(qr/\[alert\].*worker process \d+ exited on signal 9/);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;

    upstream app {
        zone apps 64k;
        server 127.0.0.1:%%PORT_8081%% max_conns=50;
        server 127.0.0.1:%%PORT_8089%% max_fails=1 fail_timeout=60s;
        server 127.0.0.1:%%PORT_8082%% down;
        server 127.0.0.1:%%PORT_8082%% backup;
    }
    upstream plain { server 127.0.0.1:%%PORT_8081%%; }

    server {
        listen 127.0.0.1:%%PORT_8080%% reuseport;
        location /app/ { proxy_pass http://app/; }
        location /plain/ { proxy_pass http://plain/; }
        location /api { api write=off; }
        location = /basic_status { stub_status; }
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8082));
$t->run();

my ($p1, $p2, $dead) = (port(8081), port(8082), port(8089));

sub get_json {
	my ($uri) = @_;
	my $r = http_get($uri);
	my ($code) = $r =~ /^HTTP\/1.1 (\d+)/;
	my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
	my $v = eval { decode_json($body // '') };
	return ($code // 0, $v, $r);
}

# Known traffic through both workers: 10 answers 200, 3 answer 404, and the
# dead peer fails once (retried elsewhere).
my $ok = 0;
$ok++ for grep { http_get("/app/n$_") =~ /^HTTP\/1.1 200/ } 1 .. 10;
$ok++ for grep { http_get("/app/status/404") =~ /^HTTP\/1.1 404/ } 1 .. 3;
is($ok, 13, 'traffic answered');

my ($code, $v, $raw) = get_json('/api/9/http/upstreams');
is($code, 200, 'upstreams: 200');
like($raw, qr/^Content-Type: application\/json\r$/mi, 'JSON content type');
ok($v && !exists $v->{plain}, 'only zone upstreams are listed');
my $app = $v->{app} // {};
my @peers = @{$app->{peers} // []};
is(scalar @peers, 4, 'four peers');

my ($live) = grep { $_->{server} eq "127.0.0.1:$p1" } @peers;
my ($gone) = grep { $_->{server} eq "127.0.0.1:$dead" } @peers;
my ($down) = grep { $_->{server} eq "127.0.0.1:$p2" && !$_->{backup} } @peers;
my ($bak) = grep { $_->{backup} } @peers;

is($live->{requests}, 13, 'requests counted across workers');
is($live->{responses}{'2xx'} . '/' . $live->{responses}{'4xx'} . '/' . $live->{responses}{total},
	'10/3/13', 'responses by class');
ok($live->{received} > 0 && $live->{state} eq 'up' && $live->{fails} == 0,
	'received bytes, state up, no fails');
is($live->{max_conns}, 50, 'max_conns shown');
ok($live->{selected} =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, 'selected as ISO time');
is($gone->{state} . ' ' . $gone->{fails} . ' ' . $gone->{unavail}, 'unavail 1 1',
	'failed peer: unavail, fails and unavail counted once in all');
is($down->{state}, 'down', 'down peer');
ok($bak && $bak->{state} eq 'up' && $bak->{requests} == 0, 'backup peer, unused');
is($app->{zone}, 'apps', 'zone name');
my $s = $app->{sluice} // {};
ok($s->{size} == 65536 && $s->{used} > 0 && $s->{used} < $s->{size}
	&& $s->{peer_slots_used} == 4 && $s->{generation} >= 1,
	'sluice: zone size, bytes used, peers, generation');

($code, $v) = get_json('/api/9/http/upstreams/app');
ok($code == 200 && @{$v->{peers}} == 4, 'one upstream');
($code, $v) = get_json('/api/9/http/upstreams/plain');
is($code . ' ' . ($v->{error}{code} // ''), '404 UpstreamNotFound', 'upstream without a zone: 404');
($code, $v) = get_json('/api/');
is(join(',', @{$v // []}), '1,2,3,4,5,6,7,8,9', 'versions');
($code, $v) = get_json('/api/42/http');
is($code . ' ' . ($v->{error}{code} // ''), '404 UnknownVersion', 'unknown version');
($code, $v) = get_json('/api/9/nope');
is($code . ' ' . ($v->{error}{code} // ''), '404 PathNotFound', 'unknown path');
my $r = http("DELETE /api/9/http/upstreams/app HTTP/1.0\nHost: localhost\n\n");
like($r, qr/^HTTP\/1.1 405.*MethodDisabled/s, 'read-only: 405');

# stub_status: nginx's text; counters of both workers.
$r = http_get('/basic_status');
like($r, qr/\r\n\r\nActive connections: \d+ \nserver accepts handled requests\n \d+ \d+ \d+ \nReading: \d+ Writing: \d+ Waiting: \d+ \n\z/,
	'stub_status format');
my ($acc, $hand, $req) = $r =~ /\n (\d+) (\d+) (\d+) \n/;
# 13 proxied, 7 API calls, this one; one connection each.
is("$acc $hand $req", '21 21 21', 'accepts, handled and requests of both workers');

# Reading: a connection that has sent half a head (nginx counts it from its
# first byte); Writing: the stub_status request itself.
my $half = http("GET / HTTP/1.1\r\nHo", start => 1);
select(undef, undef, undef, 0.3);
like(http_get('/basic_status'), qr/\nReading: 1 Writing: 1 Waiting: \d+ \n\z/,
	'stub_status: Reading and Writing');
close $half;

# SIGKILL a worker while requests are in flight.
my @w = $t->worker_pids();
my @slow = map { http("GET /app/slow/1 HTTP/1.0\nHost: localhost\n\n", start => 1) } 1 .. 6;
select(undef, undef, undef, 0.2);
kill 'KILL', $w[0];
http_end($_) for @slow;
ok($t->waitforlog(qr/worker process $w[0] exited on signal 9/), 'killed worker reaped');
my @again;
for (1 .. 50) {
	@again = $t->worker_pids();
	last if @again == 2 && !grep { $_ == $w[0] } @again;
	select(undef, undef, undef, 0.1);
}
is(scalar(grep { $_ != $w[0] } @again), 2, 'respawned');
$ok = 0;
$ok++ for grep { http_get("/app/after$_") =~ /^HTTP\/1.1 200/ } 1 .. 10;
($code, $v) = get_json('/api/9/http/upstreams/app');
ok($ok == 10 && $code == 200 && @{$v->{peers}} == 4, 'zone still serves; API still answers');
