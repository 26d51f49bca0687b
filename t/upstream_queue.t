#!/usr/bin/perl

# queue N [timeout=TIME] (NGINX Plus's): a request whose first pick finds no
# peer waits for one instead of getting 502: a peer at max_conns that frees,
# peers failed (max_fails) until fail_timeout ends, a resolve name's first
# DNS answer. Past N waiting requests, or after the timeout, 502 with the
# reason in the error log. $upstream_queue_time is the wait. Refused in
# stream and with bad values.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(26);

$t->write_file_expand('sluice.conf', <<'EOF2');

%%TEST_GLOBALS%%

worker_processes 1;

events {
}

http {
    log_format q "$uri $status [$upstream_queue_time] [$upstream_addr]";
    access_log %%TESTDIR%%/access.log q;
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;
    resolver_timeout 1s;

    upstream one {
        zone z 64k;
        server 127.0.0.1:%%PORT_8081%% max_conns=1;
        queue 1 timeout=5s;
    }
    upstream short {
        zone z;
        server 127.0.0.1:%%PORT_8081%% max_conns=1;
        queue 4 timeout=500ms;
    }
    upstream fifo {
        zone z;
        server 127.0.0.1:%%PORT_8081%% max_conns=1;
        queue 5;
    }
    upstream plain {
        zone z;
        server 127.0.0.1:%%PORT_8081%% max_conns=1;
    }
    upstream failed {
        zone z;
        server 127.0.0.1:%%PORT_8082%% max_fails=1 fail_timeout=2s;
        server 127.0.0.1:%%PORT_8083%% max_fails=1 fail_timeout=2s;
        queue 10 timeout=10s;
    }
    upstream named {
        zone z;
        server slow.test:%%PORT_8081%% resolve;
        queue 10 timeout=5s;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /one/ { proxy_pass http://one/; }
        location /short/ { proxy_pass http://short/; }
        location /plain/ { proxy_pass http://plain/; }
        location /fifo/ { proxy_pass http://fifo/; }
        location /failed/ { proxy_pass http://failed/; }
        location /named/ { proxy_pass http://named/; }
        location /api/ { api; }
        location = /metrics { metrics; }
    }
}

EOF2

# slow.test has no answer at first: its queries time out (resolver_timeout
# 1s, which bounds the wait for a first answer without a queue).
$t->write_file('dns.txt', "slow.test SILENT\n");
$t->dns(port(8053));
$t->backend(port(8081));
$t->run();

my $p = port(8081);

# max_conns=1: a slow request holds the peer; the next waits in the queue
# and is served when it ends.
my $slow = http_get('/one/slow/1/a', start => 1);
select(undef, undef, undef, 0.3);
my $t0 = time();
my $queued = http_get('/one/b', start => 1);
select(undef, undef, undef, 0.2);
# The queue (1 place) is full: at once 502.
my $t1 = time();
like(http_get('/one/c'), qr/^HTTP\/1.1 502/, 'queue full: 502');
ok(time() - $t1 < 1, 'queue full: at once');
# NGINX Plus's queue object in the API, and the metrics, meanwhile.
my ($api) = (http_get('/api/9/http/upstreams/one') // '') =~ /"queue":(\{[^}]*\})/;
is($api, '{"max_size":1,"overflows":1,"size":1}', 'API: one waiting, one overflow');
my $metrics = http_get('/metrics') // '';
like($metrics, qr/^sluice_upstream_queue_size\{upstream="one"\} 1$/m, 'metrics: queue size');
like($metrics, qr/^sluice_upstream_queue_overflows_total\{upstream="one"\} 1$/m,
	'metrics: overflows');
like(http_end($slow), qr/^HTTP\/1.1 200/, 'the slow request');
like(http_end($queued), qr/^HTTP\/1.1 200/, 'the queued request is served');
my $waited = time() - $t0;
ok($waited >= 0.4 && $waited < 3, 'after the slow one ended') or diag($waited);

# With the peer busy, four requests queue one after the other and are all
# served, one at a time, as releases wake them (the longest-waiting first;
# a waiter's own look every 25 ms may come first, so the order is not
# asserted).
$slow = http_get('/fifo/slow/0.5/a', start => 1);
select(undef, undef, undef, 0.2);
my @q;
for my $n (1 .. 4) {
	push @q, http_get("/fifo/slow/0.2/q$n", start => 1);
	select(undef, undef, undef, 0.05);
}
http_end($_) for $slow, @q;
ok($t->waitforlog(qr/^\/fifo\/slow\/0\.2\/q4 /m, 5, 'access.log'), 'the queued requests ended');
my $served = join ' ', sort $t->read_file('access.log') =~ /^\/fifo\/slow\/0\.2\/(q\d) 200 \[(?:0\.[1-9]|[1-9])/mg;
is($served, 'q1 q2 q3 q4', 'all served after waiting in the queue');

# Without a queue the same situation is a 502 at once.
$slow = http_get('/plain/slow/1/a', start => 1);
select(undef, undef, undef, 0.3);
like(http_get('/plain/b'), qr/^HTTP\/1.1 502/, 'no queue: 502');
http_end($slow);

# The queue's timeout: 502 after it.
$slow = http_get('/short/slow/2/a', start => 1);
select(undef, undef, undef, 0.3);
$t1 = time();
like(http_get('/short/b'), qr/^HTTP\/1.1 502/, 'timed out: 502');
my $took = time() - $t1;
ok($took >= 0.45 && $took < 1.5, 'after the queue timeout') or diag($took);
http_end($slow);

# Peers failed by max_fails wait out fail_timeout in the queue once they
# are back.
like(http_get('/failed/x'), qr/^HTTP\/1.1 502/, 'both peers refuse: 502');
$t->backend(port(8082));
$t1 = time();
like(http_get('/failed/y'), qr/^HTTP\/1.1 200/, 'queued until fail_timeout ended');
$took = time() - $t1;
ok($took >= 1 && $took < 4, 'waited for fail_timeout') or diag($took);

# A resolve name without an answer yet: the queue waits for it, past
# resolver_timeout.
my $named = http_get('/named/z', start => 1);
select(undef, undef, undef, 1.5);
$t->write_file('dns.txt', "slow.test A 127.0.0.1 30\n");
like(http_end($named), qr/^HTTP\/1.1 200/, 'queued until the first answer');

ok($t->waitforlog(qr/^\/named\/z /m, 5, 'access.log'), 'logged');
my $log = $t->read_file('access.log');
my ($q) = $log =~ /^\/one\/b 200 \[(\d+\.\d{3})\] \[127\.0\.0\.1:$p\]$/m;
ok(defined $q && $q >= 0.4 && $q < 3, '$upstream_queue_time: the wait') or diag($log);
my ($n) = $log =~ /^\/named\/z 200 \[(\d+\.\d{3})\]/m;
ok(defined $n && $n >= 1.4 && $n < 5, '$upstream_queue_time: the wait for the answer') or diag($log);

my $err = $t->read_file('error.log');
like($err, qr/upstream queue is full while connecting to upstream.*request: "GET \/one\/c /,
	'full: logged');
like($err, qr/upstream queue timed out while connecting to upstream.*request: "GET \/short\/b /,
	'timed out: logged');

$t->stop();

###############################################################################

# Refused, with file:line: bad values, twice, a stream upstream.
my $d = $t->testdir();
sub emerg {
	my ($block, $ups, $re, $name) = @_;
	$t->write_file('bad.conf', "events { }\n$block {\nupstream u {\nserver 127.0.0.1:1;\n"
		. "$ups\n}\n}\n");
	my (undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'stderr', '-t');
	like($err, qr/\[emerg\] \d+#0: $re in \Q$d\E\/bad\.conf:5\b/, $name);
}

emerg('http', 'queue 0;', '"queue" directive invalid value', 'queue 0');
emerg('http', 'queue 5 timeout=0;', 'invalid parameter "timeout=0"', 'bad timeout');
emerg('http', 'queue 5; queue 6;', '"queue" directive is duplicate', 'duplicate');
emerg('stream', 'queue 5;', '"queue" directive is not allowed here', 'stream');
