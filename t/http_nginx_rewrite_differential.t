#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on the redirects the
# rewrite module and return make: rewrite with each flag, with and without
# arguments (a trailing ?), to an absolute URL, to $scheme://, a named
# capture, captures holding escapes, + and bytes that are not UTF-8, a
# malformed escape written in the replacement, return with a path, a URL
# and a relative text; absolute_redirect, port_in_redirect,
# server_name_in_redirect, a directory without its slash. Each path goes
# with several Host fields (a port, another name, an address, IPv6, a
# trailing dot, none with HTTP/1.0); the status, the Location and a 200's
# body must be the same.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);
my $d = $t->testdir();
mkdir "$d/www";
mkdir "$d/www/dir";

my $server = <<"EOF";
    server {
        listen 127.0.0.1:PORT;
        server_name localhost alias.test;
        root $d/www;
        location /rw/ {
            rewrite ^/rw/perm/(.*)\$ /to/\$1 permanent;
            rewrite ^/rw/red/(.*)\$ /to/\$1?x=1 redirect;
            rewrite ^/rw/noargs/(.*)\$ /to/\$1? redirect;
            rewrite ^/rw/abs/(.*)\$ http://other.test/\$1 redirect;
            rewrite ^/rw/absq/(.*)\$ https://other.test/\$1?q=\$arg_a;
            rewrite ^/rw/imp/(.*)\$ http://imp.test/\$1;
            rewrite ^/rw/last/(.*)\$ /tail/\$1 last;
            rewrite ^/rw/brk/(.*)\$ /tail/\$1 break;
            rewrite ^/rw/loop/(.*)\$ /rw/loop/\$1 last;
            rewrite ^/rw/sch/(.*)\$ \$scheme://\$host/s/\$1;
            rewrite ^/rw/nam/(?<rest>.*)\$ /n/\$rest?r=\$rest redirect;
            rewrite ^/rw/qa/(.*)\$ /q?a=\$1 redirect;
            rewrite ^/rw/int/(.*)\$ /tail/\$1;
            rewrite ^/rw/mal\$ /m%zz/%4z/%41%7e%2f?%41 redirect;
            return 200 "rw \$uri \$args";
        }
        location /tail/ { return 200 "tail \$uri \$args \$request_uri"; }
        location /ret/ { return 301 /dest\$uri\$is_args\$args; }
        location /reta/ { return 302 http://x.test:8080/y; }
        location /retr/ { return 307 relative; }
        location /off/ {
            absolute_redirect off;
            rewrite ^/off/(.*)\$ /to/\$1 redirect;
        }
        location /port/ {
            port_in_redirect off;
            rewrite ^/port/(.*)\$ /to/\$1 redirect;
        }
        location /sn/ {
            server_name_in_redirect on;
            rewrite ^/sn/(.*)\$ /to/\$1 redirect;
        }
        location /snp/ {
            server_name_in_redirect on;
            port_in_redirect off;
            return 302 /p;
        }
        location /dir { }
    }
EOF
nginx_beside($t, $server);

my @paths = ('/rw/perm/a', '/rw/perm/a?b=1', '/rw/red/a', '/rw/red/a?b=2', '/rw/noargs/a?b=3',
	'/rw/abs/a?b=4', '/rw/absq/a?a=5', '/rw/imp/z?c=6', '/rw/last/x?d=7', '/rw/brk/x?e=8',
	'/rw/loop/x', '/rw/other', '/ret/a?z=1', '/ret/a', '/reta/', '/retr/', '/off/a?k=1',
	'/port/a', '/sn/a', '/snp/', '/dir', '/dir?x=1', '/rw/perm/%20sp', '/rw/red/%3F', '/rw/perm/a%2Fb',
	'/rw/perm/a+b', '/rw/perm/a+b%41', '/rw/perm/%26%3F%23%25', '/rw/sch/%20x', '/rw/nam/%20y',
	'/rw/qa/%26z', '/rw/qa/a&b', '/rw/int/%20q?o=1', '/rw/abs/%3Fk', '/rw/perm/%E9', '/rw/perm/%22%3C', '/rw/mal');
my @hosts = ('localhost', 'alias.test', 'localhost:PORT', 'Alias.Test:81', '127.0.0.1', '[::1]:99', undef,
	'localhost.');

my (@diffs, $same);
for my $path (@paths) {
	for my $host (@hosts) {
		for my $ver ('1.1', '1.0') {
			next if !defined $host && $ver eq '1.1';
			my @o = map {
				my $port = port($_);
				my $h = defined $host ? 'Host: ' . ($host =~ s/PORT/$port/r) . "\r\n" : '';
				my $b = http("GET $path HTTP/$ver\r\n${h}Connection: close\r\n\r\n", raw => 1,
					PeerAddr => "127.0.0.1:$port", timeout => 3) // '';
				my ($head, $body) = split /\r\n\r\n/, $b, 2;
				$head //= '';
				my ($code) = $head =~ /^HTTP\/1\.[01] (\d{3})/;
				my @f = map { my $n = $_; map { "$n=$_" } $head =~ /^\Q$n\E: ([^\r]*)/mgi } qw/Location/;
				$body = '' unless ($code // 0) == 200;
				join(' | ', $code // 'none', @f, $body // '') =~ s/:$port\b/:PORT/gr;
			} 8081, 8080;
			if ($o[0] eq $o[1]) { $same++; next }
			push @diffs, "$path host=" . ($host // '-') . " $ver:\n  nginx  [$o[0]]\n  sluice [$o[1]]";
		}
	}
}
is(scalar(@diffs), 0, "redirects: the same (" . ($same // 0) . ')')
	or diag(join("\n", @diffs[0 .. ($#diffs < 40 ? $#diffs : 40)]));
