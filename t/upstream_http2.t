#!/usr/bin/perl

# HTTP/2 to upstreams, nginx as the backend (`listen ... http2`, prior
# knowledge): proxy_http_version 2 and grpc_pass reach it over HTTP/2 with
# the client's headers less the connection-specific ones, a request body
# and `te: trailers`. keepalive_min 4: four connections to the one
# address, concurrent requests spread over them by fewest active streams
# (nginx's $connection tells them apart); keepalive_time 1s recycles them
# with no failed request; reloading the backend (GOAWAY on its
# connections) under load fails no request either. The API counts the
# connections. A PING unanswered (http2_ping_interval) closes a
# connection whose peer stopped.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;
use POSIX qw/WNOHANG/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/need_nginx_h2 need_grpc nginx_backend nginx_reload
	grpc_backend grpc_call tcp_established/;

need_nginx_h2();
need_grpc();

my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(26);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream h2 {
        zone h2 64k;
        server 127.0.0.1:%%PORT_8081%%;
        keepalive_min 4;
    }
    upstream aged {
        zone aged 64k;
        server 127.0.0.1:%%PORT_8082%%;
        keepalive_min 2;
        keepalive_time 1s jitter=20%;
    }
    upstream narrow {
        server 127.0.0.1:%%PORT_8084%%;
    }
    upstream pinged {
        server 127.0.0.1:%%PORT_8083%%;
        http2_ping_interval 300ms timeout=1s;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location / {
            proxy_pass http://h2;
            proxy_http_version 2;
            proxy_set_header X-Set set;
            proxy_set_header Keep-Alive 1;
        }
        location /g/ {
            grpc_pass grpc://h2;
            grpc_set_header X-Grpc yes;
        }
        location /gi/ {
            grpc_set_header X-Grpc if;
            if ($arg_g) { grpc_pass grpc://h2; }
            return 200 "no if\n";
        }
        location /gp/ {
            proxy_pass http://127.0.0.1:%%PORT_8085%%;
            grpc_set_header X-Grpc if;
            if ($arg_g) { grpc_pass grpc://h2; }
        }
        location /aged/ {
            proxy_pass http://aged;
            proxy_http_version 2;
        }
        location /test.Echo/ {
            grpc_pass grpc://pinged;
        }
        location /dyn/ {
            set $b 127.0.0.1:%%PORT_8082%%;
            proxy_pass http://$b;
            proxy_http_version 2;
        }
        location /narrow/ {
            proxy_pass http://narrow/slow/;
            proxy_http_version 2;
        }
        location /api/ {
            api;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8085%%;
        return 200 "h1 backend";
    }
}

EOF

my $d = $t->testdir();
$t->write_file('big.bin', 'b' x 60_000);
my $http = <<"EOF";
log_format c '\$connection \$request_uri \$status';
server {
    listen 127.0.0.1:%PORT% http2;
    access_log $d/nginx_%NAME%/access.log c;
    location / {
        return 200 "\$server_protocol \$request_method \$http_host x-set=\$http_x_set x-grpc=\$http_x_grpc x-client=\$http_x_client te=\$http_te ka=\$http_keep_alive up=\$http_upgrade len=\$content_length\\n";
    }
    location /slow/ {
        alias $d/;
        limit_rate 40k;
    }
}
EOF
$t->write_file('mid.bin', 'm' x 30_000);
for (['a', 8081], ['b', 8082], ['c', 8084]) {
	my ($name, $p) = @$_;
	(my $h = $http) =~ s/%PORT%/port($p)/e;
	$h =~ s/%NAME%/$name/g;
	# The third takes two streams at a time per connection.
	$h =~ s/http2;/http2;\n    http2_max_concurrent_streams 2;/ if $name eq 'c';
	nginx_backend($t, $name, $h);
}
grpc_backend($t, port(8083), 'ok', 'gamma');
$t->run();

sub conns_used {
	my ($name, $re) = @_;
	my %by;
	for (split /\n/, $t->read_file("nginx_$name/access.log")) {
		my ($c, $uri) = split / /;
		$by{$c}++ if $uri =~ $re;
	}
	return \%by;
}

# Requests over HTTP/2.

my $r = http(<<EOF, body => 'hello');
POST /x HTTP/1.1
Host: client.example
X-Client: 1
Connection: close, Upgrade
Upgrade: websocket
Keep-Alive: timeout=5
TE: trailers
Content-Length: 5

EOF
like($r, qr!^HTTP/1\.1 200!, 'proxy_http_version 2: 200');
like($r, qr!HTTP/2\.0 POST h2 x-set=set x-grpc= x-client=1 te=trailers ka= up= len=5!,
	'over HTTP/2: $proxy_host, set and client headers, te, no hop-by-hop, the length');

$r = http(<<EOF);
GET /g/x HTTP/1.1
Host: client.example
Connection: close

EOF
like($r, qr!HTTP/2\.0 GET client\.example x-set= x-grpc=yes!, 'grpc_pass: the client\'s host, grpc_set_header');

# grpc_pass in an `if` (nginx's "if in location"): the location's
# grpc_set_header with it; a return after it still answers, as in nginx
# (the rewrite phase ends first); the location's proxy_pass when the
# condition does not hold.
like(http_get('/gi/x?g=1'), qr!^HTTP/1\.1 200.*\n\r\nno if$!s, 'grpc_pass in if: return still answers');
like(http_get('/gp/x?g=1'), qr!HTTP/2\.0 GET localhost x-set= x-grpc=if!,
	'grpc_pass in if: taken, with the location\'s grpc_set_header');
like(http_get('/gp/x'), qr!^HTTP/1\.1 200.*\n\r\nh1 backend$!s, 'grpc_pass in if: the location\'s pass otherwise');

like(http_get('/dyn/x'), qr!HTTP/2\.0 GET 127\.0\.0\.1:\d+ !, 'proxy_pass with variables over HTTP/2');

# keepalive_min 4: four connections.

sub api {
	my ($u) = @_;
	my $j = http_get("/api/9/http/upstreams/$u") // '';
	my ($open) = $j =~ /"open":(\d+)/;
	my ($rec) = $j =~ /"recycled":(\d+)/;
	my ($active) = $j =~ /"active":(\d+)/;
	return { open => $open // -1, recycled => $rec // -1, active => $active // -1 };
}
ok(poll_until(sub { api('h2')->{open} == 4 }, 5), 'api: 4 connections open');
is(tcp_established(port(8081)), 4, 'the backend has 4 connections');

# Eight slow responses at once: two on each connection.
my @s = map { http("GET /slow/big.bin?$_ HTTP/1.0\nHost: x\n\n", start => 1) } 1 .. 8;
ok(poll_until(sub { api('h2')->{active} == 8 }, 3), 'api: 8 active streams');
my $all = join '', map { http_end($_) } @s;
my $ok200 = () = $all =~ /HTTP\/1\.1 200/mg;
is($ok200, 8, 'eight slow responses');
my $by = conns_used('a', qr!^/slow/!);
is_deeply([sort values %$by], [2, 2, 2, 2], 'fewest active: two streams on each connection')
	or diag(explain $by);
is(tcp_established(port(8081)), 4, 'still 4 connections');

# A peer taking two streams at a time: five requests at once on its one
# connection, the others wait for a free stream.
@s = map { http("GET /narrow/mid.bin?$_ HTTP/1.0\nHost: x\n\n", start => 1) } 1 .. 5;
$all = join '', map { http_end($_) } @s;
$ok200 = () = $all =~ /HTTP\/1\.1 200/g;
is($ok200, 5, 'SETTINGS_MAX_CONCURRENT_STREAMS 2: five at once, all answered');
$by = conns_used('c', qr!^/slow/mid!);
is_deeply([values %$by], [5], 'on one connection');
unlike($t->read_file('error.log'), qr/REFUSED|refused stream/i, 'none sent past the limit');

# keepalive_time 1s: recycled, no request fails. Then a reload of the
# backend under load: GOAWAY on every connection, no request fails.

# Requests from $n clients for $secs seconds: (total, failed).
sub load {
	my ($path, $n, $secs, $during) = @_;
	my @kids;
	for my $k (1 .. $n) {
		my $pid = fork() // die "fork: $!";
		if ($pid == 0) {
			my ($ok, $bad) = (0, 0);
			my $end = time() + $secs;
			while (time() < $end) {
				my $r = http_get("$path$k") // '';
				if ($r =~ /^HTTP\/1\.1 200/) { $ok++ } else { $bad++ }
			}
			$t->write_file("load_$k", "$ok $bad");
			POSIX::_exit(0);
		}
		push @kids, $pid;
	}
	$during->() if $during;
	waitpid($_, 0) for @kids;
	my ($ok, $bad) = (0, 0);
	for my $k (1 .. $n) {
		my ($o, $b) = split / /, $t->read_file("load_$k");
		$ok += $o;
		$bad += $b;
	}
	return ($ok + $bad, $bad);
}

ok(poll_until(sub { api('aged')->{open} == 2 }, 5), 'keepalive_time: 2 connections open');
my ($n, $bad) = load('/aged/', 3, 3);
ok($n > 30, "keepalive_time: $n requests");
is($bad, 0, 'keepalive_time: none failed');
# (Said in full when it fails: it failed once in a loaded whole-suite run.)
my $aged = api('aged');
ok($aged->{recycled} >= 2, 'api: connections recycled')
	or diag(explain $aged, http_get('/api/9/http/upstreams/aged'));
ok(keys %{conns_used('b', qr!^/aged/!)} > 2, 'the backend saw new connections');

($n, $bad) = load('/', 4, 3, sub {
	sleep 1;
	nginx_reload($t, 'a');
	sleep 1;
	nginx_reload($t, 'a');
});
is($bad, 0, "backend reloaded twice (GOAWAY) under load: none of $n failed");
ok(poll_until(sub { tcp_established(port(8081)) == 4 }, 5), 'then 4 connections again');

# A PING not answered: the peer stopped (SIGSTOP), its connection is
# closed and another opened when it comes back.

$r = grpc_call('/test.Echo/Unary', messages => ['p']);
is($r->{status}, '0', 'pinged upstream answers');
my $py = $t->{_backends}{'127.0.0.1:' . port(8083)};
kill 'STOP', $py;
my $closed = $t->waitforlog(qr/did not answer an HTTP\/2 PING in time/, 4);
kill 'CONT', $py;
ok($closed, 'unanswered PING: the connection is closed');
$r = grpc_call('/test.Echo/Unary', messages => ['q']);
is_deeply($r->{messages}, ['gamma:q'], 'then a new one serves');
