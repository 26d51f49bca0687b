#!/usr/bin/perl

# health_check type=grpc against grpcio-health-checking's own servicer
# (PyPI's package, which scripts/test installs in a venv beside Debian's
# grpcio), not t/lib/grpc_backend.py's hand-made answers: the statuses the
# library sets are what sluice reads. A SERVING peer gets traffic,
# NOT_SERVING takes it out, SERVING brings it back; grpc_service= asks for
# a named service, and one the servicer never heard of (NOT_FOUND) fails.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/need_grpc grpc_backend grpc_answers health_lib_python/;

need_grpc();
my $py = health_lib_python()
	or plan(skip_all => 'no grpcio-health-checking in target/grpc-venv (scripts/test installs it)');

my $t = Test::Sluice->new()->has(qw/http upstream_zone/)->plan(9);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF2');

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
        server 127.0.0.1:%%PORT_8082%% max_fails=0;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / {
            grpc_pass grpc://g;
            health_check interval=200ms fails=1 passes=1 type=grpc;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8085%%;
        location / {
            grpc_pass grpc://s;
            health_check interval=200ms fails=1 passes=1 type=grpc grpc_service=my.Svc;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8089%%;
        location /api/ { api; }
    }
}

EOF2

my ($p1, $p2) = map { port($_) } (8081, 8082);
$t->write_file("hf_$p1", "- SERVING\n");
$t->write_file("hf_$p2", "- SERVING\n");
grpc_backend($t, $p1, 'ok', 'one', "$d/hf_$p1", python => $py);
grpc_backend($t, $p2, 'ok', 'two', "$d/hf_$p2", python => $py);
$t->run();

# The peer's state, through the API on port(8089).
sub state_is { peer_state_is(@_[0 .. 2], port(8089)) }

# Which of the two backends answered 10 calls through port $port.
sub answers { my $c = grpc_answers(@_); join '/', map { $c->{$_} // 0 } qw/one two/ }

ok(-e "$d/hf_$p1.lib" && -e "$d/hf_$p2.lib" && !-e "$d/hf_$p2.log",
	'the backends answer with the library\'s servicer, not the hand-made one');
ok(state_is('g', $p1, 'up') && state_is('g', $p2, 'up'), 'SERVING from the library: both up');
ok(state_is('s', $p2, 'unhealthy'), 'grpc_service= a service the servicer never heard of (NOT_FOUND): unhealthy');
is(answers(port(8080)), '5/5', 'both get traffic');

$t->write_file("hf_$p2", "- NOT_SERVING\n");
ok(state_is('g', $p2, 'unhealthy'), 'NOT_SERVING from the library: unhealthy');
is(answers(port(8080)), '10/0', 'and no traffic');

$t->write_file("hf_$p2", "- SERVING\nmy.Svc SERVING\n");
ok(state_is('g', $p2, 'up'), 'SERVING again: up');

# grpc_service=my.Svc, now that the servicer knows it.
ok(state_is('s', $p2, 'up'), 'grpc_service=: the named service SERVING');
$t->write_file("hf_$p2", "- SERVING\nmy.Svc NOT_SERVING\n");
ok(state_is('s', $p2, 'unhealthy'), 'grpc_service=: the named service NOT_SERVING');
