#!/usr/bin/perl

# $upstream_queue_time: how long a request waited for peers before its first
# attempt (a resolve name's first DNS answer); 0.000 once there are peers,
# for an upstream without resolve, and for every retry; the whole
# resolver_timeout when no answer comes (502, the upstream's name as the
# address).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(6);

$t->write_file_expand('sluice.conf', <<'EOF2');

%%TEST_GLOBALS%%

events {
}

http {
    log_format q "$uri [$upstream_queue_time] [$upstream_addr]";
    access_log %%TESTDIR%%/access.log q;
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;
    resolver_timeout 3s;

    upstream slow { zone z 64k; server slow.test:%%PORT_8081%% resolve; }
    upstream mute { zone z; server mute.test:%%PORT_8081%% resolve; }
    upstream two {
        server 127.0.0.1:%%PORT_8089%%;
        server 127.0.0.1:%%PORT_8081%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /slow { proxy_pass http://slow; }
        location /mute { proxy_pass http://mute; }
        location /two { proxy_pass http://two; }
    }
}

EOF2

$t->write_file('dns.txt', "slow.test DELAY 400\nslow.test A 127.0.0.1 30\nmute.test SILENT\n");
$t->dns(port(8053));
$t->backend(port(8081));
$t->run();

my $p = port(8081);

like(http_get('/slow/1'), qr/^HTTP\/1.1 200/, 'first request waited for the answer');
like(http_get('/slow/2'), qr/^HTTP\/1.1 200/, 'second request');
http_get('/two');
like(http_get('/mute'), qr/^HTTP\/1.1 502/, 'no answer: 502');

ok($t->waitforlog(qr/^\/mute /m, 5, 'access.log'), 'logged');
my $log = $t->read_file('access.log');
my ($first) = $log =~ /^\/slow\/1 \[(\d+\.\d{3})\] \[127\.0\.0\.1:$p\]$/m;
ok(defined $first && $first >= 0.2 && $first <= 2.5, 'queue time: the wait for the first answer')
	or diag($log);
like($log, qr/^\/slow\/2 \[0\.000\] .*\n\/two \[0\.000, 0\.000\] \[127\.0\.0\.1:\d+, 127\.0\.0\.1:$p\]\n\/mute \[(?:2\.9|3\.0)\d\d\] \[mute\]$/m,
	'then none; none for a fixed upstream and its retry; resolver_timeout without an answer');
