#!/usr/bin/perl

# Upgrade (WebSocket) tunnelling: with Upgrade and Connection passed on as
# nginx's documentation shows, a 101 from the upstream switches both sides and
# bytes flow both ways; without them the upstream sees no Upgrade; a tunnel
# keeps a graceful stop waiting until worker_shutdown_timeout; a tunnel keeps
# its client connection's worker_connections slot.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(8);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%
worker_shutdown_timeout 1s;

worker_processes 1;

events {
    worker_connections 2;
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /ws {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
        }
        location /plain { proxy_pass http://127.0.0.1:%%PORT_8081%%/echo; }
    }
}

EOF

$t->backend(port(8081));
$t->run();

my $s = http("GET /ws HTTP/1.1\nHost: localhost\nUpgrade: test\nConnection: Upgrade\n\n", start => 1);
my $sel = IO::Select->new($s);
my $head = '';
while ($head !~ /\r\n\r\n/ && $sel->can_read(3)) {
	$s->sysread($head, 4096, length $head) or last;
}
like($head, qr!^HTTP/1\.1 101 Switching Protocols\r\n!, '101 to the client');
like($head, qr!^Upgrade: test\r$!mi, 'Upgrade header passed');

$s->syswrite("hello tunnel");
my $got = '';
while (length($got) < 12 && $sel->can_read(3)) {
	$s->sysread($got, 4096, length $got) or last;
}
is($got, 'HELLO TUNNEL', 'bytes flow both ways');

unlike(http("GET /plain HTTP/1.1\nHost: localhost\nConnection: close\nUpgrade: test\n\n"), qr/Upgrade:/i,
	'no Upgrade upstream unless configured');

# Two tunnels hold worker_connections 2: a third client waits until one
# ends (before, a tunnel gave its slot back when the HTTP connection handed
# over, so tunnels were not limited).
my $s2 = http("GET /ws HTTP/1.1\nHost: localhost\nUpgrade: test\nConnection: Upgrade\n\n", start => 1);
my $head2 = '';
my $sel2 = IO::Select->new($s2);
while ($head2 !~ /\r\n\r\n/ && $sel2->can_read(3)) {
	$s2->sysread($head2, 4096, length $head2) or last;
}
like($head2, qr!^HTTP/1\.1 101 !, 'a second tunnel');
my $third = http("GET /plain HTTP/1.1\nHost: localhost\nConnection: close\n\n", start => 1);
my $sel3 = IO::Select->new($third);
ok(!$sel3->can_read(1), 'a third client waits while two tunnels hold the slots');
close $s2;
my $r3 = http_end($third);
like($r3, qr/^HTTP\/1.1 200 /, 'and is served once a tunnel ends');

# A graceful stop waits for the tunnel, then worker_shutdown_timeout ends it.
$t->signal('QUIT');
ok($t->wait_exit(10), 'tunnel closed by worker_shutdown_timeout');
