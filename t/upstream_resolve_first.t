#!/usr/bin/perl

# A name with no answer yet: requests wait for the first answer (bounded by
# resolver_timeout) instead of failing at once; an authoritative NXDOMAIN
# still fails at once; no answer at all ends in 502 after resolver_timeout.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(4);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    resolver 127.0.0.1:%%PORT_8053%% valid=30s;
    resolver_timeout 2s;

    upstream slow { zone z 64k; server slow.test:%%PORT_8081%% resolve; }
    upstream gone { zone z; server gone.test:%%PORT_8081%% resolve; }
    upstream mute { zone z; server mute.test:%%PORT_8081%% resolve; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /slow { proxy_pass http://slow; }
        location /gone { proxy_pass http://gone; }
        location /mute { proxy_pass http://mute; }
    }
}

EOF

$t->write_file('dns.txt', "slow.test DELAY 300\nslow.test A 127.0.0.1 30\n"
	. "gone.test RCODE 3\nmute.test SILENT\n");
$t->dns(port(8053));
$t->backend(port(8081));
$t->run();

# The first lookup of slow.test is answered after 300 ms; the request sent
# now waits for it.
like(http_get('/slow'), qr/^HTTP\/1.1 200/, 'waited for the first answer');
sleep 0.5;
my $start = time();
like(http_get('/gone'), qr/^HTTP\/1.1 502/, 'NXDOMAIN: 502');
ok(time() - $start < 1, 'at once');
$start = time();
like(http_get('/mute') . (time() - $start >= 1.5 ? ' waited' : ''), qr/^HTTP\/1.1 502.* waited$/s,
	'no answer: 502 after resolver_timeout');
