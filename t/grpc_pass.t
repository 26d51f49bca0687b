#!/usr/bin/perl

# grpc_pass to gRPC backends (grpcio on /usr/bin/python3, t/lib/grpc_backend.py),
# driven over HTTP/1.1: a length-prefixed message in a POST with
# content-type application/grpc and te: trailers, the answer's messages in
# the chunked body and grpc-status in its trailers. Unary, server-,
# client-streaming and bidi calls; grpc_next_upstream unavailable: a
# Trailers-Only UNAVAILABLE moves the call (and pick_first) to the other
# peer, without it the status passes; a peer refusing connections is
# grpc-status 14 (UNAVAILABLE) in a Trailers-Only answer, one that never
# answers the connect is grpc-status 4 (DEADLINE_EXCEEDED) after
# grpc_connect_timeout; a request that is not gRPC gets the plain 502.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/need_grpc grpc_backend grpc_call/;

need_grpc();

my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(24);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format up '$request_uri $status $upstream_addr $upstream_status';
    access_log %%TESTDIR%%/access.log up;

    upstream ok {
        server 127.0.0.1:%%PORT_8081%%;
    }
    upstream failover {
        zone failover 64k;
        server 127.0.0.1:%%PORT_8082%%;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }
    upstream passes {
        server 127.0.0.1:%%PORT_8082%%;
        server 127.0.0.1:%%PORT_8081%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /test.Echo/ {
            grpc_pass grpc://ok;
        }
        location /api/ {
            api;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8083%%;
        location / {
            grpc_pass failover;
            grpc_next_upstream error timeout unavailable;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8084%%;
        location / {
            grpc_pass grpc://passes;
            grpc_next_upstream error timeout;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8085%%;
        location / {
            grpc_pass grpc://127.0.0.1:%%PORT_8099%%;
            grpc_connect_timeout 1s;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8086%%;
        location / {
            grpc_pass grpc://127.0.0.1:%%PORT_8098%%;
            grpc_connect_timeout 500ms;
        }
    }
}

EOF

grpc_backend($t, port(8081), 'ok', 'alpha');
grpc_backend($t, port(8082), 'unavailable', 'beta');
$t->blackhole(port(8098));
$t->run();

# Calls, one of each kind.

my $r = grpc_call('/test.Echo/Unary', messages => ['hello']);
is($r->{code}, 200, 'unary: 200');
is_deeply($r->{messages}, ['alpha:hello'], 'unary: the answer');
is($r->{status}, '0', 'unary: grpc-status 0 in the trailers');
is($r->{trailers}{'x-backend'}, 'alpha', 'unary: the backend\'s own trailer');

$r = grpc_call('/test.Echo/ServerStream', messages => ['s']);
is_deeply($r->{messages}, ['alpha:0:s', 'alpha:1:s', 'alpha:2:s'], 'server streaming: three answers');
is($r->{status}, '0', 'server streaming: grpc-status 0');

$r = grpc_call('/test.Echo/ClientStream', messages => ['a', 'b', 'c']);
is_deeply($r->{messages}, ['alpha:a|b|c'], 'client streaming: one answer to three');

$r = grpc_call('/test.Echo/Bidi', messages => ['x', 'y']);
is_deeply($r->{messages}, ['alpha:x', 'alpha:y'], 'bidi: one answer each');
is($r->{status}, '0', 'bidi: grpc-status 0');

# A big message each way: flow control on both sides.
my $big = 'z' x 300_000;
$r = grpc_call('/test.Echo/ClientStream', messages => [$big, $big]);
is(length($r->{messages}[0] // ''), length("alpha:$big|$big"), 'two 300 KB messages and back');

# grpc_next_upstream unavailable: beta's Trailers-Only UNAVAILABLE is a
# failure; the call goes to alpha and pick_first stays there.

my $api = sub {
	my $j = http_get('/api/9/http/upstreams/failover') // '';
	my ($chosen) = $j =~ /"pick_first":"([^"]+)"/;
	return $chosen // 'none';
};
$r = grpc_call('/test.Echo/Unary', messages => ['f1'], port => port(8083));
is_deeply($r->{messages}, ['alpha:f1'], 'unavailable: answered by the other peer');
is($r->{status}, '0', 'unavailable: grpc-status 0');
is($api->(), '127.0.0.1:' . port(8081), 'pick_first moved to the peer that answered');
$r = grpc_call('/test.Echo/Unary', messages => ['f2'], port => port(8083));
is_deeply($r->{messages}, ['alpha:f2'], 'the next call goes there at once');
like($t->read_file('error.log'), qr/upstream answered with grpc-status 14 while reading response header from upstream.*upstream: "grpc:\/\/127\.0\.0\.1:\d+\/test\.Echo\/Unary"/,
	'error log names the status and the grpc:// upstream');
my @log = grep { /^\/test\.Echo\/Unary/ } split /\n/, $t->read_file('access.log');
my ($b, $a) = (port(8082), port(8081));
ok((grep { /Unary 200 127\.0\.0\.1:$b, 127\.0\.0\.1:$a 502, 200$/ } @log),
	'access log: both peers in $upstream_addr, the first as 502') or diag(join "\n", @log);

# Without it the status passes as the backend sent it.
my %by;
for (1 .. 4) {
	$r = grpc_call('/test.Echo/Unary', messages => ['p'], port => port(8084));
	$by{$r->{status} // 'none'}++;
}
is($by{14}, 2, 'without unavailable: UNAVAILABLE passes, round robin') or diag(explain \%by);

# No answer: Trailers-Only answers.

my $start = time();
$r = grpc_call('/test.Echo/Unary', messages => ['d'], port => port(8085));
is($r->{code}, 200, 'refused: status 200');
is($r->{status}, '14', 'refused: grpc-status 14 (UNAVAILABLE)');
is_deeply([$r->{headers}{'content-type'}, scalar @{$r->{messages}}],
	['application/grpc', 0], 'refused: content-type application/grpc, no message');
ok(time() - $start < 1, 'refused: at once');

$start = time();
$r = grpc_call('/test.Echo/Unary', messages => ['h'], port => port(8086));
is($r->{status}, '4', 'no connect: grpc-status 4 (DEADLINE_EXCEEDED)');
my $took = time() - $start;
ok($took >= 0.4 && $took < 2, 'no connect: after grpc_connect_timeout') or diag($took);

# Not gRPC: the plain error.
like(http("GET / HTTP/1.0\nHost: x\n\n", PeerAddr => '127.0.0.1:' . port(8085)),
	qr!^HTTP/1\.1 502!, 'not gRPC: 502');
