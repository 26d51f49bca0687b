#!/usr/bin/perl

# Out of worker_connections, idle keep-alive connections are closed to make
# room, the longest idle first, as nginx reuses them ("worker_connections are
# not enough, reusing connections"); a connection in the middle of a request
# is not touched.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(5);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
    worker_connections 2;
}

http {
    access_log off;
    keepalive_timeout 30s;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "ok $request_uri"; }
    }
}

EOF

$t->run();

# Two keep-alive connections take both slots, then idle (and are parked).
my @idle = map { http('', start => 1) } 1 .. 2;
like(keepalive_get($idle[$_ - 1], "/idle$_"), qr/ok \/idle$_/, "idle connection $_ served") for 1 .. 2;
select(undef, undef, undef, 0.5);

# A third client: an idle one is closed for it, not left waiting.
like(http_get('/third'), qr/ok \/third$/, 'a new client is served when only idle ones hold the slots');
ok($t->waitforlog(qr/\[warn\] .*2 worker_connections are not enough, reusing connections/),
	'logged as nginx');
ok(closed_within($idle[0], 3) || closed_within($idle[1], 3), 'an idle connection was closed for it');
