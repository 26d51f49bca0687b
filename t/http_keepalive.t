#!/usr/bin/perl

# Client keep-alive: keepalive_timeout closes an idle connection, 0 turns
# keep-alive off, keepalive_requests closes after N requests; HTTP/1.0
# without keep-alive is closed after the response.

use warnings;
use strict;

use Test::More;
use IO::Select;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(5);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    keepalive_timeout 1s 7;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "ok"; }
        location /off { keepalive_timeout 0; return 200 "off"; }
        location /three { keepalive_requests 3; return 200 "three"; }
    }
}

EOF

$t->run();

sub one { keepalive_get(@_) }


my $s = http('', start => 1);
like(one($s, '/'), qr/^Keep-Alive: timeout=7\r$/m, 'first request, Keep-Alive header');
my $start = time();
ok(closed_within($s, 3) && time() - $start >= 0.9, 'closed after keepalive_timeout 1s idle');

$s = http('', start => 1);
like(one($s, '/off'), qr/^Connection: close\r$/m, 'keepalive_timeout 0: Connection: close');

$s = http('', start => 1);
my @r = map { one($s, '/three') } 1 .. 3;
ok($r[0] !~ /Connection: close/ && $r[2] =~ /^Connection: close\r$/m, 'keepalive_requests 3');

my $r = http("GET / HTTP/1.0\nHost: localhost\n\n");
like($r, qr/ok$/, 'HTTP/1.0 answered and closed');
