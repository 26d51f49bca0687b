#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on the variables the
# everyday modules make: map (regex with a named capture, case, hostnames,
# an empty and an escaped key, a value that is a variable, a map of a map),
# geo (CIDR, a header as the address, ranges), split_clients, realip
# (X-Forwarded-For, trusted and not, recursive), and auth_request with
# auth_request_set and error_page for every answer of the auth upstream.
# Seeded random headers (NGINX_VARS_SEED replays); each request goes to
# both, and the status, the fields and the body must be the same. A guard:
# it found no difference when it was written.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);

my %script;
for my $a (qw/200 401 403 404 500 302 204/) {
	$script{"/auth/$a"} = { send => "HTTP/1.1 $a X\r\nX-User: u$a\r\nWWW-Authenticate: Basic realm=\"r$a\"\r\n"
		. "Location: /loc$a\r\nSet-Cookie: c=$a\r\nContent-Length: 4\r\n\r\nbody" };
}

my $server = <<'EOF';
    map $http_x_a $m1 { default d; ~^a(?<n>\d+)$ "num$n"; b1 b; ~*^C c; "" empty; \\x back; }
    map $http_x_h $m2 { hostnames; default none; *.example.com wild; .example.org dot; example.net exact; ~^www\d+\. reg; }
    map $uri $m3 { /a/x A; ~^/a/(.)(.) "$2$1"; default $uri; }
    map $m1 $m4 { d dd; default "<$m1>"; }
    geo $g { default zero; 127.0.0.0/24 lo24; 127.0.0.2/32 two; }
    geo $http_x_ip $g3 { default none; 10.0.0.0/8 ten; 192.168.1.1 one; 10.1.0.0/16 ten1; }
    geo $remote_addr $g4 { ranges; default no; 127.0.0.1-127.0.0.1 self; 10.0.0.0-10.0.0.255 net; }
    split_clients "${http_x_k}salt" $sc { 10% a; 20.5% b; 0.5% c; * z; }
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        set_real_ip_from 127.0.0.1;
        set_real_ip_from 10.0.0.0/8;
        real_ip_header X-Forwarded-For;
        location /a/ { return 200 "$m1|$m2|$m3|$m4|$g|$g3|$g4|$sc|$remote_addr|$realip_remote_addr|$n"; }
        location /r/ { real_ip_recursive on; return 200 "$remote_addr|$realip_remote_addr|$g|$g4"; }
        location /p/ {
            auth_request /auth/$arg_a;
            auth_request_set $u $upstream_http_x_user;
            auth_request_set $s $upstream_status;
            add_header X-U $u;
            return 200 "ok $u $s";
        }
        location /pe/ {
            auth_request /auth/$arg_a;
            error_page 401 = @four;
            return 200 "pe";
        }
        location @four { return 200 "four"; }
        location /auth/ { internal; proxy_pass http://127.0.0.1:BACKEND; proxy_pass_request_body off; proxy_set_header Content-Length ""; }
    }
EOF
nginx_beside($t, $server, %script);

my $seed = $ENV{NGINX_VARS_SEED} // int(rand(1 << 31));
srand($seed);
sub pick { $_[int(rand(@_))] }

my @req;
for (1 .. 400) {
	my @h;
	push @h, 'X-A: ' . pick('a1', 'a12', 'ax', 'b1', 'B1', 'c', 'Cz', 'xc', '', '\\x', 'a1 ') if rand() < 0.8;
	push @h, 'X-H: ' . pick('a.example.com', 'example.com', 'x.y.example.com', 'example.org', 'a.example.org',
		'example.net', 'www.example.net', 'www1.z', 'www.z', 'EXAMPLE.NET', 'example.net.', 'A.Example.COM') if rand() < 0.8;
	push @h, 'X-IP: ' . pick('10.1.2.3', '10.2.0.1', '192.168.1.1', '192.168.1.2', 'junk', '', '10.1.0.0',
		'::1', '10.0.0.1,1.2.3.4') if rand() < 0.6;
	push @h, 'X-K: ' . pick(map { "k$_" } 1 .. 40) if rand() < 0.8;
	push @h, 'X-Forwarded-For: ' . pick('10.0.0.5', '1.2.3.4', '1.2.3.4, 10.0.0.7', '10.0.0.9, 127.0.0.1',
		'junk', '1.2.3.4,10.0.0.2', '2001:db8::1', '  10.0.0.3  ', '127.0.0.2') if rand() < 0.6;
	my $path = pick('/a/x', '/a/xy', '/a/zzz', '/r/', '/a/');
	push @req, [$path, @h];
}
for my $a (qw/200 401 403 404 500 302 204/) {
	push @req, ["/p/?a=$a"], ["/pe/?a=$a"];
}

my (@diffs, $same);
for my $r (@req) {
	my ($path, @h) = @$r;
	my @o = map {
		my $b = http("GET $path HTTP/1.1\r\nHost: localhost\r\n" . join('', map { "$_\r\n" } @h)
			. "Connection: close\r\n\r\n", raw => 1, PeerAddr => '127.0.0.1:' . port($_), timeout => 3) // '';
		my ($head, $body) = split /\r\n\r\n/, $b, 2;
		$head //= '';
		my ($code) = $head =~ /^HTTP\/1\.1 (\d{3})/;
		my @f = map { my $n = $_; map { "$n=$_" } $head =~ /^\Q$n\E: ([^\r]*)/mgi }
			qw/X-U WWW-Authenticate Location Set-Cookie Content-Type/;
		$body = '' unless ($code // 0) == 200;
		join(' | ', $code // 'none', @f, $body // '');
	} 8081, 8080;
	if ($o[0] eq $o[1]) { $same++; next }
	push @diffs, "$path @h:\n  nginx  [$o[0]]\n  sluice [$o[1]]";
}
is(scalar(@diffs), 0, scalar(@req) . " requests (seed $seed): the same (" . ($same // 0) . ')')
	or diag(join("\n", @diffs[0 .. ($#diffs < 40 ? $#diffs : 40)]));
