#!/usr/bin/perl

# Timeouts: client_body_timeout (408), client_header_timeout (a stalled
# head is closed), proxy_connect_timeout (504 and nginx's log line, against a
# listener whose accept queue is full), and the upstream keepalive_time.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(6);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    client_header_timeout 1s;
    keepalive_timeout 1s;

    upstream aged { server 127.0.0.1:%%PORT_8081%%; keepalive_time 1s; }
    upstream jittered { server 127.0.0.1:%%PORT_8081%%; keepalive_time 2s jitter=50%; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /body { client_body_timeout 500ms; proxy_pass http://127.0.0.1:%%PORT_8081%%/echo; }
        location /stuck { proxy_connect_timeout 500ms; proxy_pass http://127.0.0.1:%%PORT_8082%%; }
        location /aged/ { proxy_pass http://aged/; }
        location /jittered/ { proxy_pass http://jittered/; }
    }
}

EOF

$t->backend(port(8081));

# 127.0.0.1:8082: a listener that never accepts, its queue filled: connecting to it hangs.
$t->blackhole(port(8082));

$t->run();

like(http("POST /body HTTP/1.0\nHost: localhost\nContent-Length: 10\n\nabc"), qr!^HTTP/1\.1 408 !,
	'client_body_timeout: 408');

my $s = http("GET / HTTP/1.1\nHost: loc", start => 1, raw => 1);
my $start = time();
my $sel = IO::Select->new($s);
my $closed = $sel->can_read(4) && !$s->sysread(my $b, 100);
my $took = time() - $start;
ok($closed && $took >= 0.8, "client_header_timeout closes a stalled head (after ${took}s)");

my $r = http_get('/stuck');
like($r, qr!^HTTP/1\.1 504 Gateway Time-out!, 'proxy_connect_timeout: 504');
like($t->read_file('error.log'), qr!upstream timed out \(110: Connection timed out\) while connecting to upstream!,
	'connect timeout logged');

sub conns { my ($c) = http_get('/aged/conns') =~ /\r\n\r\n(\d+)$/; $c }
http_get('/aged/x');
my $before = conns();
sleep 1.3;
http_get('/aged/x');
ok(conns() > $before, 'keepalive_time retires an old upstream connection');

# keepalive_time 2s jitter=50%: an age limit between 1 and 2 s.
sub jconns { my ($c) = http_get('/jittered/conns') =~ /\r\n\r\n(\d+)$/; $c }
http_get('/jittered/x');
my $j0 = jconns();
select(undef, undef, undef, 0.3);
my $j1 = jconns();
select(undef, undef, undef, 2.0);
http_get('/jittered/x');
my $j2 = jconns();
ok($j1 == $j0 && $j2 > $j1, "jitter: reused while young, retired before 2 s ($j0 $j1 $j2)");
