#!/usr/bin/perl

# gRPC end to end: a real gRPC client (grpcio, t/lib/grpc_client.py, one
# HTTP/2 connection) to sluice, over h2c (`http2 on`, prior knowledge) and
# over TLS (ALPN h2, the client trusting a test CA), grpc_pass to two gRPC
# backends (t/lib/grpc_backend.py). Unary, server-streaming,
# client-streaming and bidi calls come back with their answers, status OK
# and the backend's own trailer, from both backends in turn. A backend
# stopped: with the default grpc_next_upstream the call succeeds on the
# other one; with `grpc_next_upstream off` the call gets UNAVAILABLE within
# grpc_connect_timeout and the next call succeeds on the other one. A
# backend answering UNAVAILABLE with `grpc_next_upstream ... unavailable`
# and pick_first: the call succeeds on the other one, and the API and the
# access log show the choice moved there.

use warnings;
use strict;

use Test::More;
use Cwd qw/abs_path/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/need_grpc grpc_backend/;
use Test::Sluice::Ssl qw/need_openssl ec_ca_in ec_signed_in/;

need_grpc();
need_openssl();

my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(41);
my $d = $t->testdir();

$t->write_file('leaf.ext', "basicConstraints=CA:FALSE\nsubjectAltName=DNS:grpc.example\n");
ec_ca_in($d, 'ca');
ec_signed_in($d, 'grpc', 'ca', 'leaf.ext');

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format up '$request_uri $status $upstream_addr';
    access_log %%TESTDIR%%/access.log up;

    upstream two {
        zone two 64k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
    }
    upstream strict {
        zone strict 64k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
    }
    upstream first {
        zone first 64k;
        server 127.0.0.1:%%PORT_8083%%;
        server 127.0.0.1:%%PORT_8081%%;
        pick_first;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen 127.0.0.1:%%PORT_8443%% ssl;
        http2 on;
        server_name grpc.example;
        ssl_certificate     grpc.crt;
        ssl_certificate_key grpc.key;

        location / {
            grpc_pass grpc://two;
        }
        location /api/ {
            api;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8084%%;
        http2 on;
        location / {
            grpc_pass grpc://strict;
            grpc_next_upstream off;
            grpc_connect_timeout 1s;
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8085%%;
        http2 on;
        location / {
            grpc_pass grpc://first;
            grpc_next_upstream error timeout unavailable;
        }
    }
}

EOF

grpc_backend($t, port(8081), 'ok', 'alpha');
grpc_backend($t, port(8082), 'ok', 'beta');
grpc_backend($t, port(8083), 'unavailable', 'gamma');
$t->run();

my $client = abs_path('lib/grpc_client.py');

# One call by the gRPC client: { messages, trailers, status, details, elapsed }.
sub call {
	my ($port, $mode, @msgs) = @_;
	my @tls = $port == port(8443) ? ('--ca', "$d/ca.crt", '--name', 'grpc.example') : ();
	open my $fh, '-|', '/usr/bin/python3', $client, @tls, '--deadline', '8',
		"127.0.0.1:$port", $mode, @msgs or die "client: $!\n";
	my %r = (messages => [], trailers => {});
	while (<$fh>) {
		chomp;
		my ($k, $v) = split / /, $_, 2;
		$v //= '';
		if ($k eq 'message') {
			push @{$r{messages}}, $v;
		} elsif ($k eq 'trailer') {
			my ($n, $x) = split / /, $v, 2;
			$r{trailers}{$n} = $x;
		} else {
			$r{$k} = $v;
		}
	}
	close $fh;
	return \%r;
}

# The name the answers start with, if all the same and matching the
# trailer x-backend.
sub who {
	my ($r) = @_;
	my %n = map { (split /:/)[0] => 1 } @{$r->{messages}};
	my @n = keys %n;
	return @n == 1 && ($r->{trailers}{'x-backend'} // '') eq $n[0] ? $n[0] : 'mixed';
}

# Each kind of call, over h2c and over TLS; round robin over both backends.

for my $via ([port(8080), 'h2c'], [port(8443), 'h2 over TLS']) {
	my ($port, $name) = @$via;
	my %seen;

	my $r = call($port, 'unary', 'hello');
	my $w = who($r);
	$seen{$w}++;
	is($r->{status}, 'OK', "$name unary: OK");
	is_deeply($r->{messages}, ["$w:hello"], "$name unary: the answer");
	like($w, qr/^(alpha|beta)$/, "$name unary: the backend's trailer matches its answer");

	$r = call($port, 'server', 's');
	$w = who($r);
	$seen{$w}++;
	is($r->{status}, 'OK', "$name server streaming: OK");
	is_deeply($r->{messages}, ["$w:0:s", "$w:1:s", "$w:2:s"], "$name server streaming: three answers");
	like($w, qr/^(alpha|beta)$/, "$name server streaming: the trailer");

	$r = call($port, 'client', 'a', 'b', 'c');
	$w = who($r);
	$seen{$w}++;
	is($r->{status}, 'OK', "$name client streaming: OK");
	is_deeply($r->{messages}, ["$w:a|b|c"], "$name client streaming: one answer to three");
	like($w, qr/^(alpha|beta)$/, "$name client streaming: the trailer");

	$r = call($port, 'bidi', 'x', 'y', 'z');
	$w = who($r);
	$seen{$w}++;
	is($r->{status}, 'OK', "$name bidi: OK");
	is_deeply($r->{messages}, ["$w:x", "$w:y", "$w:z"], "$name bidi: one answer each");
	like($w, qr/^(alpha|beta)$/, "$name bidi: the trailer");

	is_deeply([sort keys %seen], ['alpha', 'beta'], "$name: both backends answered")
		or diag(explain \%seen);
}

my @log = split /\n/, $t->read_file('access.log');
is(scalar(grep { m!^/test\.Echo/\w+ 200 127\.0\.0\.1:\d+$! } @log), 8,
	'access log: 8 calls, 200, one upstream each') or diag(join "\n", @log);

# beta stopped.

$t->stop_backend(port(8082));

# With the default grpc_next_upstream (error timeout): the call goes to alpha.
my %by;
for (1 .. 4) {
	my $r = call(port(8080), 'unary', 'd');
	$by{$r->{status} eq 'OK' ? who($r) : $r->{status}}++;
}
is_deeply(\%by, { alpha => 4 }, 'stopped: the calls go to the other backend') or diag(explain \%by);

# With grpc_next_upstream off: UNAVAILABLE within grpc_connect_timeout (1s),
# then the next call succeeds on alpha.
my ($failed, $after, @oks);
for (1 .. 3) {
	my $r = call(port(8084), 'unary', 'o');
	if ($r->{status} ne 'OK') {
		$failed = $r;
		$after = call(port(8084), 'unary', 'o2');
		last;
	}
	push @oks, who($r);
}
is(scalar(grep { $_ ne 'alpha' } @oks), 0, 'off: an OK call before comes from alpha');
ok($failed, 'off: a call reached the stopped backend');
$failed //= {};
$after //= { messages => [], trailers => {} };
is($failed->{status}, 'UNAVAILABLE', 'off: the call gets UNAVAILABLE');
ok(($failed->{elapsed} // 9) < 1, 'off: within grpc_connect_timeout') or diag($failed->{elapsed});
is($after->{status}, 'OK', 'off: the next call succeeds');
is_deeply($after->{messages}, ['alpha:o2'], 'off: on the other backend');

# gamma answers UNAVAILABLE; grpc_next_upstream unavailable: alpha answers,
# and pick_first moved there.

my $r = call(port(8085), 'unary', 'u');
is($r->{status}, 'OK', 'unavailable: the call succeeds');
is_deeply($r->{messages}, ['alpha:u'], 'unavailable: on the other backend');
is($r->{trailers}{'x-backend'}, 'alpha', 'unavailable: its trailer');
my $api = http_get('/api/9/http/upstreams/first') // '';
like($api, qr/"pick_first":"127\.0\.0\.1:${\ port(8081)}"/, 'API: pick_first moved to alpha');
my ($g, $a) = (port(8083), port(8081));
@log = split /\n/, $t->read_file('access.log');
ok((grep { m!^/test\.Echo/Unary 200 127\.0\.0\.1:$g, 127\.0\.0\.1:$a$! } @log),
	'access log: gamma then alpha in $upstream_addr') or diag(join "\n", @log);
$r = call(port(8085), 'unary', 'v');
is_deeply($r->{messages}, ['alpha:v'], 'the next call goes to alpha at once');
@log = split /\n/, $t->read_file('access.log');
is($log[-1], "/test.Echo/Unary 200 127.0.0.1:$a", 'access log: alpha alone');
