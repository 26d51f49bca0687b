#!/usr/bin/perl

# Active health checks go on per peer: a peer that accepts and never
# answers holds only its own check (until proxy_read_timeout) while the other
# peers are checked at their interval, as NGINX Plus does.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(4);

$t->write_file_expand('sluice.conf', <<'EOF2');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream u {
        zone z 64k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / {
            proxy_pass http://u;
            proxy_read_timeout 2s;
            health_check interval=200ms uri=/hc;
        }
    }
}

EOF2

# 8082 delays every answer by 30 s: each of its checks hangs until
# proxy_read_timeout.
$t->backend(port(8081));
$t->backend(port(8082), delay => 30);
$t->run();

# Connections 8081 has accepted (each check is one: Connection: close),
# asked directly (one response read, the backend keeps the connection).
sub conns {
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8081), Timeout => 3)
		or return -1;
	my ($n) = keepalive_get($s, '/conns') =~ /\r\n\r\n(\d+)/;
	close $s;
	return $n // -1;
}

my $before = conns();
select(undef, undef, undef, 1.5);
my $after = conns();
# About 7 checks in 1.5 s; one if a round waited for 8082's check.
ok($after - $before >= 5, 'the answering peer is checked at its interval')
	or diag("$before -> $after");
ok($t->waitforlog(qr/peer is unhealthy while reading response header from upstream, .* of peer 127\.0\.0\.1:@{[port(8082)]} /, 5),
	'the hanging peer: unhealthy after proxy_read_timeout');
unlike($t->read_file('error.log'), qr/peer is unhealthy.* of peer 127\.0\.0\.1:@{[port(8081)]} /,
	'the answering peer stays healthy');
like(http_get('/x'), qr/^HTTP\/1.1 200/, 'requests go to the healthy peer');
