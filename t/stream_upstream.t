#!/usr/bin/perl

# Stream proxy settings and balancers: proxy_connect_timeout against a
# listener whose accept queue is full, proxy_next_upstream_tries and
# proxy_next_upstream_timeout bounding the retries, hash $remote_addr and
# least_conn over sessions, listen's reuseport and backlog.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/stream/)->plan(8);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

stream {
    log_format t "$status [$upstream_addr]";
    access_log %%TESTDIR%%/stream.log t;

    upstream stuck {
        server 127.0.0.1:%%PORT_8082%%;
        server 127.0.0.1:%%PORT_8081%%;
    }
    upstream stuck2 {
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%%;
    }
    upstream dead3 {
        server 127.0.0.1:%%PORT_8087%% max_fails=0;
        server 127.0.0.1:%%PORT_8088%% max_fails=0;
        server 127.0.0.1:%%PORT_8081%%;
    }
    upstream hashed { hash $remote_addr; server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8083%%; }
    upstream fewest { least_conn; server 127.0.0.1:%%PORT_8081%%; server 127.0.0.1:%%PORT_8083%%; }

    server { listen 127.0.0.1:%%PORT_8070%%; proxy_pass stuck; proxy_connect_timeout 1s; }
    server { listen 127.0.0.1:%%PORT_8071%%; proxy_pass dead3; proxy_next_upstream_tries 2; }
    server {
        listen 127.0.0.1:%%PORT_8072%%;
        proxy_pass stuck2;
        proxy_connect_timeout 1s;
        proxy_next_upstream_timeout 500ms;
    }
    server { listen 127.0.0.1:%%PORT_8073%% reuseport backlog=64; proxy_pass hashed; }
    server { listen 127.0.0.1:%%PORT_8074%%; proxy_pass fewest; }
}

EOF

$t->backend(port(8081), close => 1);
$t->backend(port(8083), close => 1);

# 127.0.0.1:8082: a listener that never accepts, its queue filled: connecting to it hangs.
$t->blackhole(port(8082));

$t->run();

sub via { http_get('/x', PeerAddr => '127.0.0.1:' . port($_[0])) }
sub port_of { my ($p) = $_[0] =~ /^X-Port: (\d+)/mi; $p // 'none' }

# Round robin starts with the stuck peer: 1 s, then the next one.
my $start = time();
is(port_of(via(8070)), port(8081), 'proxy_connect_timeout: after it, the next peer');
ok(time() - $start >= 0.9, 'after the timeout');
ok($t->waitforlog(qr/upstream timed out \(110: Connection timed out\) while connecting to upstream/),
	'logged');

# Two dead peers before the live one, two tries: the session gives up.
is(via(8071), '', 'proxy_next_upstream_tries 2: no third try');
ok($t->waitforlog(qr/^502 \[127\.0\.0\.1:${\ port(8087)}, 127\.0\.0\.1:${\ port(8088)}\]$/m, 2, 'stream.log'),
	'both tries in the log, then 502');

# proxy_next_upstream_timeout 500ms: the stuck peer takes 1 s, no retry.
my @r = map { via(8072) } 1 .. 2;
is(scalar(grep { $_ eq '' } @r), 1, 'proxy_next_upstream_timeout: no retry after it');

# hash $remote_addr: one client, one peer.
my %h;
$h{port_of(via(8073))}++ for 1 .. 6;
is(scalar(keys %h), 1, 'hash $remote_addr keeps a client on one peer');

# least_conn: a session held on one peer sends the next ones to the other.
my $slow = http("GET /slow/2 HTTP/1.0\nHost: x\n\n", start => 1, PeerAddr => '127.0.0.1:' . port(8074));
sleep 0.3;
my %l;
$l{port_of(via(8074))}++ for 1 .. 4;
my ($held) = port_of(http_end($slow));
ok(keys(%l) == 1 && !exists $l{$held}, 'least_conn steers away from the busy peer');
