#!/usr/bin/perl

# proxy_read_timeout on a reused upstream connection: the connection keeps
# one timer for its waits for a response head, moved on for each request.
# A request after that timer expired while the connection sat idle in the
# keep-alive cache is answered (not taken for a timeout), a slow answer on
# the same connection still times out with 504 at proxy_read_timeout, and
# every request goes over the one connection until that.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_keepalive/)->plan(9);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream backend { server 127.0.0.1:%%PORT_8081%%; keepalive 4; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://backend; proxy_read_timeout 400ms; }
    }
}

EOF

$t->backend(port(8081));
$t->run();

like(http_get('/a'), qr/^HTTP\/1\.1 200 .*\/a$/s, 'first request');
# The timer armed for the first answer expires while the connection is idle.
sleep(0.8);
like(http_get('/b'), qr/^HTTP\/1\.1 200 .*\/b$/s, 'answered after the timer expired idle');
like(http_get('/c'), qr/^HTTP\/1\.1 200 .*\/c$/s, 'and again');
my ($conns) = http_get('/conns') =~ /\r\n\r\n(\d+)$/;
is($conns, 1, 'all over one upstream connection');

my $start = time();
like(http_get('/slow/3/x'), qr/^HTTP\/1\.1 504 /, 'a slow answer times out');
my $took = time() - $start;
cmp_ok($took, '<', 2.5, 'at proxy_read_timeout, not when the answer came');
like($t->read_file('error.log'), qr/upstream timed out .* while reading response header from upstream/,
	'logged as a timeout');

# A connection made after the timeout (the timed-out one is not reused).
like(http_get('/d'), qr/^HTTP\/1\.1 200 .*\/d$/s, 'the next request is answered');
($conns) = http_get('/conns') =~ /\r\n\r\n(\d+)$/;
is($conns, 2, 'over a new connection');
