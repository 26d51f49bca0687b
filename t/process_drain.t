#!/usr/bin/perl

# Keep-alive clients lose nothing on reload: an old worker, once told to
# stop, still answers the next request on an idle keep-alive connection
# (with Connection: close) and closes a connection only once it has been
# idle for the drain time (1 s, or worker_shutdown_timeout if shorter).
# nginx closes idle keep-alive connections at once, and a request sent at
# that moment is lost.

use warnings;
use strict;

use Test::More;
use IO::Select;
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
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "pid $pid"; }
    }
}

EOF

$t->run();

sub request { keepalive_get($_[0], '/') }


my $busy = http('', start => 1);
my $idle = http('', start => 1);
my ($old) = request($busy) =~ /pid (\d+)/;
request($idle);

$t->reload();
ok($t->waitforlog(qr/\[notice\] $old#0: gracefully shutting down/), 'old worker told to stop');
my $start = time();

my $r = request($busy);
like($r, qr/^HTTP\/1.1 200/, 'the next request on a keep-alive connection is answered');
like($r, qr/^Connection: close\r$/m, 'with Connection: close');
ok(closed_within($busy, 2), 'and the connection closed after it');

ok(closed_within($idle, 3) && time() - $start >= 0.8, 'an idle one closes after the drain time');

my $gone = 0;
for (1 .. 60) {
	$gone = !grep { $_ == $old } $t->worker_pids();
	last if $gone;
	sleep 0.1;
}
ok($gone, 'the old worker exited');
