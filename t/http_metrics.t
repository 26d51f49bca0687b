#!/usr/bin/perl

# metrics: the Prometheus text exposition, parsed by prometheus_client's own
# parser (/usr/bin/python3, Debian's python3-prometheus-client). After known
# traffic through two workers: requests and responses by class, a failing
# peer's fails, unavail and state, bytes, the zone, the stub_status
# counters, a stream upstream's connections, the process figures; a hostile
# upstream name's label round-trips; a reload goes to generation 2, and a
# binary upgrade to generation 1 of the new master, both keeping the
# counters of the peers that stay. Config
# errors with file:line.

use warnings;
use strict;

use Test::More;
use JSON::PP;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

system('/usr/bin/python3', '-c', 'import prometheus_client.parser') == 0
	or plan(skip_all => 'no python3-prometheus-client for /usr/bin/python3');

my $t = Test::Sluice->new()->has(qw/http stream upstream_zone/)->plan(31);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;

    upstream app {
        zone apps 64k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8089%% max_fails=1 fail_timeout=60s;
        server 127.0.0.1:%%PORT_8081%% backup;
    }
    upstream "we\"ird\\na\nme" {
        zone apps;
        server 127.0.0.1:%%PORT_8081%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%% reuseport;
        location /app/ { proxy_pass http://app/; }
        location /odd/ { proxy_pass "http://we\"ird\\na\nme/"; }
        location = /metrics { metrics; }
    }
}

stream {
    upstream tcp {
        zone tcps 32k;
        server 127.0.0.1:%%PORT_8081%%;
    }
    log_format s "$status";
    server { listen 127.0.0.1:%%PORT_8070%%; proxy_pass tcp; access_log stream.log s; }
}

EOF

# Reads the exposition on stdin, prints [name, labels, value, family type]
# per sample as JSON; fails on anything the parser refuses, a family without
# HELP or of type unknown.
$t->write_file('parse.py', <<'EOF');
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    if f.type not in ('counter', 'gauge', 'histogram') or not f.documentation:
        sys.exit('family %s: type %s, help %r' % (f.name, f.type, f.documentation))
    for s in f.samples:
        out.append([s.name, s.labels, s.value, f.type])
print(json.dumps(out))
EOF

$t->backend(port(8081));
$t->run();

my ($p1, $dead) = (port(8081), port(8089));

# Scrapes /metrics; returns the raw response and the parsed samples.
sub scrape {
	my $r = http_get('/metrics');
	my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
	$t->write_file('scrape.txt', $body // '');
	my $json = `/usr/bin/python3 $d/parse.py < $d/scrape.txt 2>&1`;
	my $v = eval { decode_json($json) };
	diag("parser: $json") unless $v;
	return ($r, $v // []);
}

# The value of the one sample with this name and these labels (a subset).
sub value {
	my ($samples, $name, %labels) = @_;
	my @m = grep {
		my $s = $_;
		$s->[0] eq $name && !grep { ($s->[1]{$_} // "\0") ne $labels{$_} } keys %labels
	} @$samples;
	return @m == 1 ? $m[0][2] : 'n/a(' . scalar(@m) . ')';
}

# Known traffic: 10 answers 200 and 3 answer 404 from the live peer; the
# dead peer fails once (the request goes on to the live one).
my $ok = 0;
$ok++ for grep { http_get("/app/n$_") =~ /^HTTP\/1.1 200/ } 1 .. 10;
$ok++ for grep { http_get("/app/status/404") =~ /^HTTP\/1.1 404/ } 1 .. 3;
$ok++ for grep { http_get("/odd/x$_") =~ /^HTTP\/1.1 200/ } 1 .. 2;
is($ok, 15, 'traffic answered');

# Two TCP sessions through the stream upstream. A session ends once the
# client closed too, after http_get returned: their log lines say both
# ended (and stopped counting as open) before the scrape.
for (1 .. 2) {
	http_get('/tcp', PeerAddr => '127.0.0.1:' . port(8070));
}
$t->waitforlog(qr/\A200\n200\n/, 5, 'stream.log');

my ($raw, $m) = scrape();
like($raw, qr/^Content-Type: text\/plain; version=0\.0\.4; charset=utf-8\r$/mi,
	'content type of the text format 0.0.4');
ok(@$m > 50, 'parsed by prometheus_client');

my %live = (upstream => 'app', peer => "127.0.0.1:$p1", backup => 'false');
my %gone = (upstream => 'app', peer => "127.0.0.1:$dead");
is(value($m, 'sluice_upstream_peer_requests_total', %live), 13, 'requests counted across workers');
is(join('/', map { value($m, 'sluice_upstream_peer_responses_total', %live, code => $_) }
	qw/1xx 2xx 3xx 4xx 5xx/), '0/10/0/3/0', 'responses by class');
# HTTP counts body bytes (as the API does): GETs send none.
ok(value($m, 'sluice_upstream_peer_received_bytes_total', %live) > 0
	&& value($m, 'sluice_upstream_peer_sent_bytes_total', %live) == 0,
	'body bytes sent and received');
is(value($m, 'sluice_upstream_peer_state', %live, state => 'up'), 1, 'live peer: up');
is(value($m, 'sluice_upstream_peer_fails_total', %gone) . ' '
	. value($m, 'sluice_upstream_peer_unavail_total', %gone), '1 1', 'failing peer: fails, unavail');
is(join(' ', map { value($m, 'sluice_upstream_peer_state', %gone, state => $_) } qw/up down unavail/),
	'0 0 1', 'failing peer: state unavail, one state set');
ok(value($m, 'sluice_upstream_peer_downtime_seconds_total', %gone) > 0, 'downtime in seconds');
is(value($m, 'sluice_upstream_peer_requests_total', upstream => 'app', backup => 'true'), 0,
	'backup peer unused');

is(value($m, 'sluice_upstream_peer_requests_total', upstream => "we\"ird\\na\nme"), 2,
	'hostile upstream name: label escaped and read back');

is(value($m, 'sluice_upstream_zone_size_bytes', zone => 'apps'), 65536, 'zone size');
ok(value($m, 'sluice_upstream_zone_used_bytes', zone => 'apps') > 0
	&& value($m, 'sluice_upstream_zone_peer_slots_free', zone => 'apps')
		== value($m, 'sluice_upstream_zone_peer_slots', zone => 'apps') - 4,
	'zone used bytes and free peer slots');

is(value($m, 'sluice_stream_upstream_peer_connections_total', upstream => 'tcp'), 2,
	'stream upstream: connections');
ok(value($m, 'sluice_stream_upstream_peer_received_bytes_total', upstream => 'tcp') > 100
	&& value($m, 'sluice_stream_upstream_peer_sent_bytes_total', upstream => 'tcp') > 2 * 20,
	'stream upstream: bytes both ways');
is(value($m, 'sluice_stream_sessions_total') . ' ' . value($m, 'sluice_stream_sessions_active'),
	'2 0', 'stream sessions: two, none open');

# 15 proxied requests, 2 stream sessions (not HTTP), this scrape.
is(value($m, 'sluice_connections_accepted_total') . ' ' . value($m, 'sluice_connections_handled_total')
	. ' ' . value($m, 'sluice_http_requests_total'), '16 16 16', 'accepted, handled, requests');
is(value($m, 'sluice_connections_active') . ' ' . value($m, 'sluice_connections_writing'), '1 1',
	'active and writing: the scrape');

is(value($m, 'sluice_process_workers') . ' ' . value($m, 'sluice_process_generation') . ' '
	. value($m, 'sluice_process_reloads_total') . ' ' . value($m, 'sluice_process_upgrades_total'),
	'2 1 0 0', 'workers, generation, reloads, upgrades');
ok(value($m, 'sluice_process_uptime_seconds') >= 0
	&& abs(value($m, 'sluice_process_start_time_seconds') - time()) < 600,
	'master start time and uptime');

my $r = http("POST /metrics HTTP/1.0\nHost: localhost\nContent-Length: 0\n\n");
like($r, qr/^HTTP\/1.1 405/, 'POST: 405');

# A reload: new zones, generation 2; the peers that stay keep their
# counters.
ok($t->reload(), 'reloaded');
ok(poll_until(sub { value((scrape())[1], 'sluice_process_generation') == 2 }), 'generation 2');
http_get('/app/after');
($raw, $m) = scrape();
is(value($m, 'sluice_process_reloads_total') . ' '
	. value($m, 'sluice_upstream_peer_requests_total', %live), '1 14',
	'after a reload: one reload counted, the peer\'s counters carried');

# A binary upgrade: the new master's generations count from 1, its start
# time is its own, its zones are new (the peers and their counters carried
# over).
my $start1 = value($m, 'sluice_process_start_time_seconds');
my $old = $t->master();
sub pid_in { my $p = $t->read_file($_[0]) // ''; chomp $p; $p }
sleep 1;
kill 'USR2', $old;
ok(poll_until(sub { my $p = pid_in('sluice.pid'); $p ne '' && $p ne $old }), 'upgraded');
my $new = pid_in('sluice.pid');
kill 'QUIT', $old;
ok($t->wait_exit(10), 'old master gone');
http_get('/app/upgraded') for 1 .. 2;
($raw, $m) = scrape();
is(value($m, 'sluice_process_generation') . ' ' . value($m, 'sluice_process_reloads_total') . ' '
	. value($m, 'sluice_upstream_peer_requests_total', %live) . ' '
	. value($m, 'sluice_process_upgrades_total'), '1 0 16 1',
	'after an upgrade: generation 1, no reloads, the peer\'s counters carried, one upgrade');
ok(value($m, 'sluice_process_start_time_seconds') > $start1, 'the new master\'s start time');
kill 'QUIT', $new;
poll_until(sub { !kill 0, $new }, 10);

# Config errors, with file and line.
$t->write_file('bad.conf', "events {}\nhttp {\n server {\n  location /m { metrics on; }\n }\n}\n");
my ($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'stderr', '-t');
like($err, qr/\[emerg\].*invalid number of arguments in "metrics" directive in \S*bad\.conf:4/,
	'metrics with an argument: emerg with file:line');
$t->write_file('bad.conf', "events {}\nhttp {\n server {\n  metrics;\n }\n}\n");
($rc, undef, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'stderr', '-t');
like($err, qr/\[emerg\].*"metrics" directive is not allowed here in \S*bad\.conf:4/,
	'metrics outside a location: emerg with file:line');
