#!/usr/bin/perl

# proxy_connect_race (http and stream) against a peer that never completes
# the handshake: a listener with backlog 0 that never accepts, its queue
# filled by the test, so that Linux drops further SYNs as a dead host would.
# With racing a second connect starts after 100ms and the request succeeds
# on the other peer well within proxy_connect_timeout; the abandoned connect
# is not counted as a failure. Without racing the request waits the whole
# connect timeout. Racing is bounded by proxy_next_upstream_tries.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy stream/)->plan(15);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format u "$uri $status [$upstream_addr] $request_time";
    access_log %%TESTDIR%%/access.log u;

    upstream raced { pick_first; server 127.0.0.1:%%PORT_8082%%; server 127.0.0.1:%%PORT_8081%%; }
    upstream plain { pick_first; server 127.0.0.1:%%PORT_8082%%; server 127.0.0.1:%%PORT_8081%%; }
    upstream once { pick_first; server 127.0.0.1:%%PORT_8082%%; server 127.0.0.1:%%PORT_8081%%; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        proxy_connect_timeout 3s;

        location /race/ { proxy_pass http://raced; proxy_connect_race 100ms; }
        location /plain/ { proxy_pass http://plain; }
        location /once/ {
            proxy_pass http://once;
            proxy_connect_race 100ms;
            proxy_connect_timeout 1s;
            proxy_next_upstream_tries 1;
        }
    }
}

stream {
    upstream sraced { pick_first; server 127.0.0.1:%%PORT_8082%%; server 127.0.0.1:%%PORT_8083%%; }
    server {
        listen 127.0.0.1:%%PORT_8090%%;
        proxy_pass sraced;
        proxy_connect_timeout 3s;
        proxy_connect_race 100ms;
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8083), close => 1);

# 127.0.0.1:8082: a listener that never accepts, its queue filled: SYNs to it are dropped.
$t->blackhole(port(8082));

$t->run();

sub port_of { my ($p) = ($_[0] // '') =~ /^X-Port: (\d+)/mi; $p // 'none' }

sub timed {
	my ($code) = @_;
	my $start = time();
	my $r = $code->();
	return ($r, time() - $start);
}

# Racing: the first peer hangs, the second connect wins after 100 ms.
my ($r, $took) = timed(sub { http_get('/race/x') });
is(port_of($r), port(8081), 'race: answered by the other peer');
ok($took < 1.5, 'race: well within proxy_connect_timeout') or diag("took $took s");
note(sprintf 'with proxy_connect_race 100ms: %.3f s', $took);

# The hanging peer lost but has not failed yet: it stays pick_first's
# choice, so the next request races again, and nothing is logged yet.
($r, $took) = timed(sub { http_get('/race/y') });
is(port_of($r), port(8081), 'race again: the losing peer was not marked failed');
ok($took >= 0.09, 'race again: after the race delay') or diag("took $took s");
unlike($t->read_file('error.log'), qr/while connecting to upstream.*\/race\//,
	'race: the losing connect is no error while it runs');
like($t->read_file('access.log'), qr{^/race/x 200 \[127\.0\.0\.1:${\ port(8081)}\] }m,
	'race: $upstream_addr names the winner only');

# The losing connect runs on in the background: after proxy_connect_timeout
# it fails, counts as a failure, and pick_first moves on; no more racing.
ok($t->waitforlog(qr/upstream timed out \(110: Connection timed out\) while connecting to upstream.*\/race\/x/),
	'race: the loser timed out in the background, logged');
http_get('/race/z');
my ($rt) = $t->read_file('access.log') =~ m{^/race/z 200 \[127\.0\.0\.1:${\ port(8081)}\] ([\d.]+)$}m;
ok(defined $rt && $rt < 0.1, 'race: then the choice moved, no race delay') or diag($rt // 'no line');

# Without racing: the whole connect timeout, then the next peer.
($r, $took) = timed(sub { http_get('/plain/x') });
is(port_of($r), port(8081), 'no race: answered by the other peer');
ok($took >= 2.9, 'no race: after the whole proxy_connect_timeout') or diag("took $took s");
note(sprintf 'without proxy_connect_race: %.3f s', $took);
ok($t->waitforlog(qr/upstream timed out \(110: Connection timed out\) while connecting to upstream.*\/plain\/x/),
	'no race: the timeout is logged');

# proxy_next_upstream_tries 1: no second try, so no race either.
($r, $took) = timed(sub { http_get('/once/x') });
like($r, qr/^HTTP\/1\.1 504/, 'tries 1: no race, 504 after the connect timeout');
ok($took >= 0.9, 'tries 1: waited the connect timeout') or diag("took $took s");

# The stream proxy races too.
($r, $took) = timed(sub { http_get('/x', PeerAddr => '127.0.0.1:' . port(8090)) });
is(port_of($r), port(8083), 'stream race: the other peer');
ok($took < 1.5, 'stream race: well within proxy_connect_timeout') or diag("took $took s");
