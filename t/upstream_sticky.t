#!/usr/bin/perl

# sticky cookie and sticky route: the cookie names the answering peer (the
# MD5 of its address, or its route=) with nginx's attributes; requests that
# bring it go to that peer in every worker; a peer that is down or failed
# gives way to the balancer and the cookie names the new one; route= servers
# are chosen by the first non-empty variable; config errors say file:line.

use warnings;
use strict;

use Test::More;
use Digest::MD5 qw/md5_hex/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy upstream_sticky upstream_zone/)->plan(26);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF2');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;

    upstream ck {
        zone ck 64k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8082%%;
        sticky cookie srv expires=1h domain=.example.com path=/ httponly secure samesite=lax;
    }
    upstream mv {
        zone mv 64k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8083%% max_fails=1 fail_timeout=30s;
        server 127.0.0.1:%%PORT_8082%% down;
        sticky cookie s2;
    }
    upstream rt {
        server 127.0.0.1:%%PORT_8081%% route=a;
        server 127.0.0.1:%%PORT_8082%% route=b;
        sticky route $cookie_route $arg_route;
    }

    upstream rs {
        zone rs 64k;
        resolver 127.0.0.1:%%PORT_8053%% valid=1s;
        server app.test:%%PORT_8086%% resolve;
        sticky cookie r;
    }

    upstream h2 {
        server 127.0.0.1:%%PORT_8084%%;
        server 127.0.0.1:%%PORT_8085%%;
        sticky cookie h;
    }

    # HTTP/2 (prior knowledge) backends.
    server { listen 127.0.0.1:%%PORT_8084%% http2; return 200 "h%%PORT_8084%%"; }
    server { listen 127.0.0.1:%%PORT_8085%% http2; return 200 "h%%PORT_8085%%"; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /rs { proxy_pass http://rs; }
        location /h2 { proxy_pass http://h2; proxy_http_version 2; }
        location /ck { proxy_pass http://ck; add_header X-Pid $pid; }
        location /mv { proxy_pass http://mv; }
        location /rt { proxy_pass http://rt; }
    }
}

EOF2

$t->backend(port(8081));
$t->backend(port(8082));
$t->backend(port(8083));
$t->write_file('dns.txt', "app.test A 127.0.0.2 1\napp.test A 127.0.0.3 1\n");
$t->dns(port(8053));
$t->backend(port(8086), addr => '127.0.0.2');
$t->backend(port(8086), addr => '127.0.0.3');
$t->run();

my ($p1, $p2, $p3) = (port(8081), port(8082), port(8083));
my ($id1, $id2, $id3) = map { md5_hex("127.0.0.1:$_") } ($p1, $p2, $p3);

sub get {
	my ($uri, $cookie) = @_;
	my $c = defined $cookie ? "Cookie: $cookie\n" : '';
	return http("GET $uri HTTP/1.0\nHost: localhost\n$c\n") // '';
}

sub port_of { my ($p) = $_[0] =~ /^X-Port: (\d+)/mi; $p // 'none' }

# The first response: the cookie names the peer that answered.
my $r = get('/ck');
my $p = port_of($r);
my ($line) = $r =~ /^Set-Cookie: (srv=.*?)\r$/mi;
my $want = $p eq $p1 ? $id1 : $id2;
like($line // '', qr/^srv=$want; expires=\w{3}, \d\d-\w{3}-\d\d \d\d:\d\d:\d\d GMT; max-age=3600; domain=\.example\.com; httponly; secure; samesite=lax; path=\/$/,
	'cookie with the peer\'s MD5 and every attribute, in nginx\'s order');

# Without a cookie the balancer spreads them.
my %seen;
$seen{port_of(get('/ck'))}++ for 1 .. 6;
ok($seen{$p1} && $seen{$p2}, 'no cookie: round robin');

# With it, every request in bursts of parallel connections (both workers)
# goes to the named peer.
my (%pids, %ports);
for (1 .. 10) {
	my @c = map { http("GET /ck HTTP/1.0\nHost: x\nCookie: a=b; srv=$id2\n\n", start => 1) } 1 .. 12;
	for my $c (@c) {
		my $resp = http_end($c);
		$ports{port_of($resp)}++;
		my ($pid) = $resp =~ /^X-Pid: (\d+)/mi;
		$pids{$pid}++ if $pid;
	}
	last if keys %pids >= 2;
}
is(join(',', keys %ports), $p2, 'the cookie\'s peer answers every request');
is(scalar keys %pids, 2, 'in both workers');
like(get('/ck', "srv=$id2"), qr/^Set-Cookie: srv=$id2;/mi, 'the cookie is sent again');

# An id nobody has: the balancer picks and the cookie is reset.
$r = get('/ck', 'srv=0123456789abcdef0123456789abcdef');
$p = port_of($r);
$want = $p eq $p1 ? $id1 : $id2;
like($r, qr/^Set-Cookie: srv=$want;/mi, 'unknown id: a new cookie for the balancer\'s pick');
$r = get('/ck', 'srv=' . ('x' x 300));
like($r, qr/^HTTP\/1.1 200.*^Set-Cookie: srv=[0-9a-f]{32};/msi, 'an overlong id is no id');

# A down peer and a failed one give way; the cookie moves.
$r = get('/mv', "s2=$id2");
is(port_of($r), $p1, 'down peer: another one');
like($r, qr/^Set-Cookie: s2=$id1\r$/mi, 'down peer: the cookie names the new one');
is(port_of(get('/mv', "s2=$id3")), $p3, 'the cookie\'s peer while it works');
$t->stop_backend(port(8083));
$r = get('/mv', "s2=$id3");
is(port_of($r), $p1, 'its peer gone: the next one answers');
like($r, qr/^Set-Cookie: s2=$id1\r$/mi, 'and the cookie moves to it');
is(port_of(get('/mv', "s2=$id3")), $p1, 'a failed peer is not tried again within fail_timeout');

# route: the first non-empty variable names the server by its route=.
my %r;
$r{port_of(get('/rt', 'route=b'))}++ for 1 .. 6;
is(join(',', keys %r), $p2, 'route cookie b');
%r = ();
$r{port_of(get('/rt?route=a'))}++ for 1 .. 6;
is(join(',', keys %r), $p1, 'route argument a');
is(port_of(get('/rt?route=a', 'route=b')), $p2, 'the first non-empty variable wins');
%r = ();
$r{port_of(get('/rt?route=zz'))}++ for 1 .. 6;
ok($r{$p1} && $r{$p2}, 'unknown route: round robin');
unlike(get('/rt', 'route=b'), qr/^Set-Cookie/mi, 'route sets no cookie');

# proxy_http_version 2: the same cookie, the same stickiness.
$r = get('/h2');
my ($hp) = $r =~ /h(\d+)$/;
my $hid = md5_hex('127.0.0.1:' . ($hp // 0));
like($r, qr/^Set-Cookie: h=$hid\r$/mi, 'HTTP/2 upstream: the cookie names the peer');
my %h2;
for (1 .. 6) { my ($x) = get('/h2', "h=$hid") =~ /h(\d+)$/; $h2{$x // 'none'}++; }
is(join(',', keys %h2), $hp // 'x', 'HTTP/2 upstream: the cookie sticks');

# A resolved peer: sticks while DNS lists it, not once it is gone.
my $p6 = port(8086);
my ($a2, $a3) = map { md5_hex("$_:$p6") } ('127.0.0.2', '127.0.0.3');
ok(poll_until(sub { backend_addr('/rs') ne 'down' }), 'resolved');
my %ra;
for (1 .. 6) { my ($x) = get('/rs', "r=$a3") =~ /^X-Addr: (\S+)/mi; $ra{$x // 'none'}++; }
is(join(',', keys %ra), '127.0.0.3', 'a resolved peer sticks');
$t->write_file('dns.txt', "app.test A 127.0.0.2 1\n");
ok(poll_until(sub { my $g = get('/rs', "r=$a3");
	$g =~ /^X-Addr: 127\.0\.0\.2\r$/mi && $g =~ /^Set-Cookie: r=$a2\r$/mi }, 10),
	'gone from DNS: another peer answers and the cookie names it');

# Config errors, as -t reports them.
sub emerg {
	my ($body, $re, $name) = @_;
	$t->write_file('t.conf', "events { }\nhttp {\nupstream u {\nserver 127.0.0.1:1;\n$body\n}\n}\n");
	my (undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
	like($err, qr/\[emerg\] \d+#0: $re in \Q$d\E\/t\.conf:5\b/, $name);
}

emerg("sticky cookie a samesite=x;", '"sticky" directive invalid "samesite" parameter value', 'bad samesite');
emerg("sticky learn create=\$cookie_a lookup=\$cookie_a zone=z:1k;", '"sticky" directive zone is too small', 'small learn zone');
emerg("server 127.0.0.1:2 route=0123456789abcdef0123456789abcdefX;",
	'invalid parameter "route=0123456789abcdef0123456789abcdefX"', 'route longer than 32');
