#!/usr/bin/perl

# stub_status while a connection is a tunnel: as in nginx, whose request
# lives on while it proxies an upgraded connection, the tunnel stays in
# Active and Writing until either side closes it; a request in flight to a
# slow upstream counts in Writing too.

use warnings;
use strict;

use Test::More;
use IO::Select;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(5);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 1;

events {
    worker_connections 64;
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
        location /slow/ { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location = /status { stub_status; }
    }
}

EOF

$t->backend(port(8081));
$t->run();

# The counters once they settle on `$want` (the connections of an earlier
# step close in their own time), else the last answer.
sub status_like {
	my ($want) = @_;
	my $r = '';
	my $until = time() + 5;
	while (time() < $until) {
		$r = http_get('/status');
		return $r if $r =~ $want;
		sleep(0.05);
	}
	return $r;
}

my $s = http("GET /ws HTTP/1.1\nHost: localhost\nUpgrade: test\nConnection: Upgrade\n\n", start => 1);
my $sel = IO::Select->new($s);
my $head = '';
while ($head !~ /\r\n\r\n/ && $sel->can_read(3)) {
	$s->sysread($head, 4096, length $head) or last;
}
like($head, qr!^HTTP/1\.1 101 !, 'the tunnel is open');

# The tunnel and the status request itself.
like(status_like(qr/^Active connections: 2 \n.*\nReading: 0 Writing: 2 /ms),
	qr/^Active connections: 2 \n.*\nReading: 0 Writing: 2 /ms,
	'a tunnel counts as active and writing');

close $s;
like(status_like(qr/^Active connections: 1 \n.*\nReading: 0 Writing: 1 /ms),
	qr/^Active connections: 1 \n.*\nReading: 0 Writing: 1 /ms,
	'a closed tunnel counts no more');

# A request waiting for its upstream is Writing (nginx's count), its
# connection Active.
my $slow = http("GET /slow/1 HTTP/1.0\nHost: localhost\n\n", start => 1);
like(status_like(qr/^Active connections: 2 \n.*\nReading: 0 Writing: 2 /ms),
	qr/^Active connections: 2 \n.*\nReading: 0 Writing: 2 /ms,
	'a slow proxied request counts as writing');
like(http_end($slow), qr/^HTTP\/1\.[01] 200/, 'and is answered');
