#!/usr/bin/perl

# The grpc_* directives grpc_conf.t only parses, at run time against the
# real binary (nginx's grpc module the reference). Backends: nginx over
# h2c for headers, HTTP statuses and a Trailers-Only grpc-status 8
# (RESOURCE_EXHAUSTED), gRPC backends (t/lib/grpc_backend.py) for calls
# that succeed and for a slow one.
#   grpc_hide_header drops a header of the backend's; grpc_pass_header
#   passes one hidden by default (Server, X-Accel-*).
#   grpc_intercept_errors on: a status >= 300 with an error_page is
#   answered with that error_page, one without passes; off: passes.
#   A 503 too: the page, not a Trailers-Only grpc-status 14.
#   grpc_next_upstream grpc_status=8: a Trailers-Only RESOURCE_EXHAUSTED
#   moves the call to the other peer, counted as that peer's failure in the
#   API; a status not listed passes as the backend sent it, no failure.
#   Not when the answer came while the client was still sending its body
#   (it cannot be sent again): then the answer passes.
#   grpc_next_upstream_tries 1: no second peer; grpc_next_upstream_timeout
#   shorter than the first peer's connect timeout: no second peer.
#   max_conns=1 counts streams on the one HTTP/2 connection: a second call
#   while one is running goes to the next peer, or with none gets
#   grpc-status 14 at once; once the first ended, a call goes there again.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/need_nginx_h2 need_grpc nginx_backend grpc_backend grpc_call
	grpc_frames/;

need_nginx_h2();
need_grpc();

my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(44);
my $d = $t->testdir();

# 8081 alpha (gRPC, answers), 8082 slowpoke (gRPC, answers after 3 s),
# 8086 nginx (headers and statuses), 8087 nginx (grpc-status 8 Trailers-Only),
# 8098 refuses connections, 8099 never completes a connect.

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format up '$host $request_uri $status $upstream_addr $upstream_status';
    access_log %%TESTDIR%%/access.log up;

    upstream listed {
        zone listed 64k;
        server 127.0.0.1:%%PORT_8087%%;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }
    upstream unlisted {
        zone unlisted 64k;
        server 127.0.0.1:%%PORT_8087%%;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }
    upstream tries1 {
        zone tries1 64k;
        server 127.0.0.1:%%PORT_8098%%;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }
    upstream tries2 {
        zone tries2 64k;
        server 127.0.0.1:%%PORT_8098%%;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }
    upstream nut {
        zone nut 64k;
        server 127.0.0.1:%%PORT_8099%%;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }
    upstream nutctl {
        zone nutctl 64k;
        server 127.0.0.1:%%PORT_8099%%;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }
    upstream late {
        zone late 64k;
        server 127.0.0.1:%%PORT_8089%%;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }
    upstream mc1 {
        zone mc1 64k;
        server 127.0.0.1:%%PORT_8082%% max_conns=1;
    }
    upstream mc2 {
        zone mc2 64k;
        server 127.0.0.1:%%PORT_8082%% max_conns=1;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location /api/ {
            api;
        }
        location = /errpage {
            return 200 "sluice error page\n";
        }

        location /hdr/ {
            grpc_pass grpc://127.0.0.1:%%PORT_8086%%;
        }
        location /hide/ {
            grpc_pass grpc://127.0.0.1:%%PORT_8086%%;
            grpc_hide_header X-Secret;
        }
        location /pass/ {
            grpc_pass grpc://127.0.0.1:%%PORT_8086%%;
            grpc_pass_header Server;
            grpc_pass_header X-Accel-Buffering;
        }
        location /icpt/ {
            grpc_pass grpc://127.0.0.1:%%PORT_8086%%;
            grpc_intercept_errors on;
            error_page 404 503 /errpage;
        }
        location /noicpt/ {
            grpc_pass grpc://127.0.0.1:%%PORT_8086%%;
            error_page 404 503 /errpage;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name listed;
        location / {
            grpc_pass grpc://listed;
            grpc_next_upstream error timeout grpc_status=8;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name unlisted;
        location / {
            grpc_pass grpc://unlisted;
            grpc_next_upstream error timeout grpc_status=13,14;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name tries1;
        location / {
            grpc_pass grpc://tries1;
            grpc_next_upstream_tries 1;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name tries2;
        location / {
            grpc_pass grpc://tries2;
            grpc_next_upstream_tries 2;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name nut;
        location / {
            grpc_pass grpc://nut;
            grpc_connect_timeout 600ms;
            grpc_next_upstream_timeout 200ms;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name nutctl;
        location / {
            grpc_pass grpc://nutctl;
            grpc_connect_timeout 600ms;
            grpc_next_upstream_timeout 5s;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name late;
        location / {
            grpc_pass grpc://late;
            grpc_next_upstream error timeout grpc_status=8;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name mc1;
        location / {
            grpc_pass grpc://mc1;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name mc2;
        location / {
            grpc_pass grpc://mc2;
        }
    }
}

EOF

# nginx answers after reading the whole request body: an h2c server in
# front (proxy_pass reads the body first) of an HTTP/1 one. An answer sent
# before the body was read is followed by RST_STREAM (NO_ERROR), which
# races with the rest of the body going out: the direct server does that,
# used once on purpose.
my ($p_hdr, $p_rx, $p_in, $p_direct) = (port(8086), port(8087), port(8088), port(8089));
nginx_backend($t, 'b', <<"EOF");
server {
    listen 127.0.0.1:$p_hdr http2;
    location / {
        add_header X-Secret s3cret;
        add_header X-Visible yes;
        add_header X-Accel-Buffering no;
        proxy_pass http://127.0.0.1:$p_in;
    }
}
server {
    listen 127.0.0.1:$p_rx http2;
    location / {
        add_header grpc-status 8 always;
        add_header grpc-message exhausted always;
        proxy_pass http://127.0.0.1:$p_in;
    }
}
server {
    listen 127.0.0.1:$p_in;
    location / {
        return 200 "backend body\\n";
    }
    location /test.Echo/ {
        default_type application/grpc;
        return 200 "";
    }
    location ~ /s404\$ { return 404 "backend 404\\n"; }
    location ~ /s403\$ { return 403 "backend 403\\n"; }
    location ~ /s503\$ { return 503 "backend 503\\n"; }
}
server {
    listen 127.0.0.1:$p_direct http2;
    location / {
        default_type application/grpc;
        add_header grpc-status 8 always;
        return 200 "";
    }
}
EOF
grpc_backend($t, port(8081), 'ok', 'alpha');
grpc_backend($t, port(8082), 'slow', 'slowpoke');
$t->blackhole(port(8099));
$t->run();

my ($pa, $ps, $pr, $pb) = (port(8081), port(8082), port(8098), port(8099));

# The access log's line for the last request to server $host.
sub last_log {
	my ($host) = @_;
	my @l = grep { /^\Q$host\E / } split /\n/, $t->read_file('access.log');
	return $l[-1] // '';
}

# The raw head of an answer, and how many times field $name is in it.
sub count_field {
	my ($r, $name) = @_;
	my ($head) = split /\r\n\r\n/, $r->{raw}, 2;
	my $n = () = ($head // '') =~ /^\Q$name\E:/mgi;
	return $n;
}

# The answer's body as it came (the backends of these answers send text,
# not gRPC messages): the part after the head, chunks joined.
sub body_of {
	my ($r) = @_;
	my (undef, $rest) = split /\r\n\r\n/, $r->{raw}, 2;
	$rest //= '';
	return $rest unless ($r->{headers}{'transfer-encoding'} // '') =~ /chunked/i;
	my $b = '';
	while ($rest =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
		my $n = hex $1 or last;
		$b .= substr($rest, 0, $n, '');
		$rest =~ s/^\r\n//;
	}
	return $b;
}

# A call started (its body $delay seconds after its head, if given): its
# socket; grpc_end reads its answer.
sub grpc_begin {
	my ($host, $msg, $delay) = @_;
	my $body = grpc_frames($msg);
	return http("POST /test.Echo/Unary HTTP/1.1\r\nHost: $host\r\n"
		. "Content-Type: application/grpc\r\nTE: trailers\r\n"
		. "Content-Length: " . length($body) . "\r\nConnection: close\r\n\r\n",
		body => $body, raw => 1, start => 1, sleep => $delay);
}

# The answer's gRPC messages and grpc-status (from the trailers, else the
# head), as "status: m1 m2".
sub grpc_end {
	my ($s) = @_;
	my $raw = http_end($s, timeout => 8) // '';
	my ($st) = $raw =~ /^grpc-status:\s*(\d+)/mi;
	my @m = $raw =~ /((?:alpha|slowpoke):\w+)/g;
	return ($st // 'none') . ': ' . join(' ', @m);
}

###############################################################################
# grpc_hide_header, grpc_pass_header.

my $r = grpc_call('/hdr/x', messages => ['h']);
is($r->{headers}{'x-secret'}, 's3cret', 'default: a header of the backend\'s passes');
like($r->{headers}{server} // '', qr/^sluice\b/, 'default: the backend\'s Server is hidden, sluice\'s instead');
ok(!exists $r->{headers}{'x-accel-buffering'}, 'default: X-Accel-Buffering is hidden');

$r = grpc_call('/hide/x', messages => ['h']);
ok(!exists $r->{headers}{'x-secret'}, 'grpc_hide_header: the header is not passed');
is($r->{headers}{'x-visible'}, 'yes', 'grpc_hide_header: the others pass') or diag($r->{raw});

$r = grpc_call('/pass/x', messages => ['h']);
like($r->{headers}{server} // '', qr/^nginx\//, 'grpc_pass_header Server: the backend\'s passes');
is(count_field($r, 'Server'), 1, 'grpc_pass_header Server: sluice adds no Server of its own');
is($r->{headers}{'x-accel-buffering'}, 'no', 'grpc_pass_header X-Accel-Buffering: passes') or diag($r->{raw});

###############################################################################
# grpc_intercept_errors.

$r = grpc_call('/icpt/s404', messages => ['e']);
is($r->{code}, 404, 'intercept on: the backend\'s status 404');
is(body_of($r), "sluice error page\n", 'intercept on: 404 answered with the error_page');

$r = grpc_call('/icpt/s403', messages => ['e']);
is($r->{code} . ' ' . body_of($r), "403 backend 403\n",
	'intercept on, no error_page for 403: the backend\'s answer passes');

$r = grpc_call('/noicpt/s404', messages => ['e']);
is($r->{code} . ' ' . body_of($r), "404 backend 404\n",
	'intercept off: the backend\'s 404 passes despite the error_page');

$r = grpc_call('/noicpt/s503', messages => ['e']);
is($r->{code} . ' ' . body_of($r), "503 backend 503\n",
	'intercept off: the backend\'s 503 passes as is');

$r = grpc_call('/icpt/s503', messages => ['e']);
is($r->{code} . ' ' . body_of($r), "503 sluice error page\n",
	'intercept on: a backend\'s 503 answered with the error_page, not a gRPC status');

###############################################################################
# grpc_next_upstream grpc_status=8: RESOURCE_EXHAUSTED (Trailers-Only)
# moves the call on; a status not listed passes.

$r = grpc_call('/test.Echo/Unary', messages => ['x1'], host => 'listed');
is($r->{status}, '0', 'grpc_status=8 listed: the call succeeds');
is_deeply($r->{messages}, ['alpha:x1'], 'grpc_status=8 listed: on the other peer');
is(last_log('listed'), "listed /test.Echo/Unary 200 127.0.0.1:$p_rx, 127.0.0.1:$pa 502, 200",
	'grpc_status=8 listed: both peers in the access log, the first as 502');
like($t->read_file('error.log'),
	qr/\[error\].*upstream answered with grpc-status 8 while reading response header from upstream/,
	'grpc_status=8 listed: the error log names the status');

$r = grpc_call('/test.Echo/Unary', messages => ['x2'], host => 'unlisted');
is($r->{code}, 200, 'grpc_status=8 not listed: status 200');
is($r->{status}, '8', 'grpc_status=8 not listed: grpc-status 8 passes');
is($r->{headers}{'grpc-message'}, 'exhausted', 'grpc_status=8 not listed: the backend\'s grpc-message');
is_deeply($r->{messages}, [], 'grpc_status=8 not listed: no message');
is(last_log('unlisted'), "unlisted /test.Echo/Unary 200 127.0.0.1:$p_rx 200",
	'grpc_status=8 not listed: one peer in the access log');

# The failure counted for the peer that failed, and none for the others.

my $f = upstream_peer('listed', $p_rx);
is(($f->{fails} // 'none') . ' ' . ($f->{unavail} // 'none'), '1 1',
	'API: the peer that answered grpc-status 8: fails 1, unavail 1');
is($f->{state}, 'unavail', 'API: that peer is unavail (max_fails=1)');
is(upstream_peer('listed', $pa)->{fails}, 0, 'API: the peer that answered: no fail');
$f = upstream_peer('unlisted', $p_rx);
is(($f->{fails} // 'none') . ' ' . ($f->{state} // 'none'), '0 up',
	'API: a status not listed counts no fail');

# The Trailers-Only answer came while the client was still sending its
# body: that body cannot be sent again (sluice.conf(5)); the answer passes.
my $late = grpc_begin('late', 'l1', 0.3);
is(grpc_end($late), '8: ', 'grpc_status=8 listed, answered before the body was in: the answer passes');

###############################################################################
# grpc_next_upstream_tries, grpc_next_upstream_timeout.

$r = grpc_call('/test.Echo/Unary', messages => ['t1'], host => 'tries1');
is($r->{status}, '14', 'tries 1: the refused peer\'s UNAVAILABLE');
is_deeply($r->{messages}, [], 'tries 1: no message');
is(last_log('tries1'), "tries1 /test.Echo/Unary 200 127.0.0.1:$pr 502",
	'tries 1: no second peer tried');

$r = grpc_call('/test.Echo/Unary', messages => ['t2'], host => 'tries2');
is_deeply($r->{messages}, ['alpha:t2'], 'tries 2: the second peer answers');
is(last_log('tries2'), "tries2 /test.Echo/Unary 200 127.0.0.1:$pr, 127.0.0.1:$pa 502, 200",
	'tries 2: both peers tried');

my $start = time();
$r = grpc_call('/test.Echo/Unary', messages => ['n1'], host => 'nut');
my $took = time() - $start;
is($r->{status}, '4', 'next_upstream_timeout 200ms: DEADLINE_EXCEEDED of the first peer');
ok($took >= 0.5 && $took < 2, 'next_upstream_timeout 200ms: after the connect timeout')
	or diag($took);
is(last_log('nut'), "nut /test.Echo/Unary 200 127.0.0.1:$pb 504",
	'next_upstream_timeout 200ms: no second peer tried');

$r = grpc_call('/test.Echo/Unary', messages => ['n2'], host => 'nutctl');
is_deeply($r->{messages}, ['alpha:n2'], 'next_upstream_timeout 5s: the second peer answers');

###############################################################################
# max_conns=1 over HTTP/2 counts streams.

my $s1 = grpc_begin('mc1', 'm1');
my $s2 = grpc_begin('mc2', 'm2');
ok(poll_until(sub { (upstream_peer('mc1', $ps)->{active} // 0) == 1
		&& (upstream_peer('mc2', $ps)->{active} // 0) == 1 }, 2),
	'max_conns: one stream active on the slow peer of each');

$start = time();
$r = grpc_call('/test.Echo/Unary', messages => ['m3'], host => 'mc1');
$took = time() - $start;
is($r->{status}, '14', 'max_conns=1, one peer: a second call gets UNAVAILABLE');
ok($took < 1.5, 'max_conns=1, one peer: at once, not after the first call') or diag($took);

$r = grpc_call('/test.Echo/Unary', messages => ['m4'], host => 'mc2');
is_deeply($r->{messages}, ['alpha:m4'], 'max_conns=1, two peers: a second call goes to the other');

is(grpc_end($s1), '0: slowpoke:m1', 'max_conns: the first call on mc1 ends well');
is(grpc_end($s2), '0: slowpoke:m2', 'max_conns: the first call on mc2 ends well');

# The stream ended, the connection stays: the peer takes a call again.
$r = grpc_call('/test.Echo/Unary', messages => ['m5'], host => 'mc1');
is_deeply($r->{messages}, ['slowpoke:m5'], 'max_conns=1: once the stream ended, a call goes there');
