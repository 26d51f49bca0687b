#!/usr/bin/perl

# health_check type=grpc: the gRPC health-checking protocol's
# grpc.health.v1.Health/Check over HTTP/2 to gRPC backends (grpcio on
# /usr/bin/python3, t/lib/grpc_backend.py, whose health answers a file
# per backend says). A SERVING peer gets traffic; NOT_SERVING, or an
# answer that is no HealthCheckResponse, takes it out after fails= and
# SERVING brings it back after passes=; grpc_service= is the service
# asked for; grpc_status=12 keeps a backend without the health service
# (UNIMPLEMENTED) up, where plain type=grpc finds it unhealthy.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/need_grpc grpc_backend grpc_stop grpc_answers/;

need_grpc();

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(18);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream g {
        zone g 64k;
        server 127.0.0.1:%%PORT_8081%% max_fails=0;
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
    }
    upstream s {
        zone s 64k;
        server 127.0.0.1:%%PORT_8083%% max_fails=0;
    }
    upstream n {
        zone n 64k;
        server 127.0.0.1:%%PORT_8086%% max_fails=0;
    }
    upstream n2 {
        zone n2 64k;
        server 127.0.0.1:%%PORT_8086%% max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / {
            grpc_pass grpc://g;
            health_check interval=200ms fails=2 passes=2 type=grpc;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8085%%;
        location / {
            grpc_pass grpc://s;
            health_check interval=200ms type=grpc grpc_service=my.Svc;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8087%%;
        location / {
            grpc_pass grpc://n;
            health_check interval=200ms type=grpc grpc_status=12;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8088%%;
        location / {
            grpc_pass grpc://n2;
            health_check interval=200ms type=grpc;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8089%%;
        location /api/ { api; }
    }
}

EOF

my ($p1, $p2, $p3, $p6) = map { port($_) } (8081, 8082, 8083, 8086);
$t->write_file("hf_$p1", "- SERVING\n");
$t->write_file("hf_$p2", "- SERVING\n");
# The server as a whole is not serving; the service asked for is.
$t->write_file("hf_$p3", "- NOT_SERVING\nmy.Svc SERVING\n");
grpc_backend($t, $p1, 'ok', 'one', "$d/hf_$p1");
grpc_backend($t, $p2, 'ok', 'two', "$d/hf_$p2");
grpc_backend($t, $p3, 'ok', 'svc', "$d/hf_$p3");
grpc_backend($t, $p6, 'ok', 'nohealth');
$t->run();

# The peer's state, through the API on port(8089).
sub state_is { peer_state_is(@_[0 .. 2], port(8089)) }
sub api_peer { upstream_peer(@_, port(8089)) }

ok(state_is('g', $p1, 'up') && state_is('g', $p2, 'up'), 'SERVING peers pass');
my $c = grpc_answers(port(8080));
is(($c->{one} // 0) . '/' . ($c->{two} // 0), '5/5', 'both SERVING peers get traffic');

$t->write_file("hf_$p2", "- NOT_SERVING\n");
ok(state_is('g', $p2, 'unhealthy'), 'NOT_SERVING: unhealthy after fails=2');
ok(api_peer('g', $p2)->{health_checks}{fails} >= 2, 'two failed checks counted');
$c = grpc_answers(port(8080));
is($c->{one}, 10, 'the NOT_SERVING peer gets no traffic');
like($t->read_file('error.log'),
	qr/\[warn\] .*peer is unhealthy while checking response of upstream, health check "" of peer 127\.0\.0\.1:$p2 in upstream "g"/,
	'unhealthy logged');

$t->write_file("hf_$p2", "- SERVING\n");
ok(state_is('g', $p2, 'up'), 'SERVING again: healthy after passes=2');
$c = grpc_answers(port(8080));
is(($c->{one} // 0) . '/' . ($c->{two} // 0), '5/5', 'the recovered peer gets traffic again');

# A truncated HealthCheckResponse, then one without its status (UNKNOWN).
$t->write_file("hf_$p2", "- GARBLED\n");
ok(state_is('g', $p2, 'unhealthy'), 'a garbled response fails the check');
$t->write_file("hf_$p2", "- SERVING\n");
ok(state_is('g', $p2, 'up'), 'and SERVING brings it back');
$t->write_file("hf_$p2", "- UNKNOWN\n");
ok(state_is('g', $p2, 'unhealthy'), 'UNKNOWN (no status field) fails the check');

# grpc_service=: the service asked for is my.Svc, which is SERVING.
ok(state_is('s', $p3, 'up'), 'grpc_service=: the named service decides');
my %asked = map { $_ => 1 } split /\n/, $t->read_file("hf_$p3.log");
is(join(',', sort keys %asked), 'my.Svc', 'grpc_service= is sent');
is(grpc_answers(port(8085))->{svc}, 10, 'the peer serving the service gets traffic');

# No health service: UNIMPLEMENTED (12).
ok(state_is('n', $p6, 'up'), 'grpc_status=12: UNIMPLEMENTED passes');
ok(state_is('n2', $p6, 'unhealthy'), 'without grpc_status=: UNIMPLEMENTED fails');
is(api_peer('n', $p6)->{health_checks}{fails}, 0, 'grpc_status=12: no check failed');

# A backend that is gone: its checks fail connecting.
$t->write_file("hf_$p1", "- NOT_SERVING\n");
grpc_stop($t, $p1);
ok(poll_until(sub { $t->read_file('error.log')
	=~ /peer is unhealthy while connecting to upstream, health check "" of peer 127\.0\.0\.1:$p1/ }, 6),
	'a stopped backend is unhealthy (connecting)');
