#!/usr/bin/perl

# merge_slashes: with off, "//" in the request path stays for location
# matching and $uri ("." and ".." segments still go); the setting is the
# one of the server the address chose, before Host picks one, as nginx
# parses the URI then.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(8);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        location = /a/b { return 200 "exact $uri"; }
        location / { return 200 "other $uri"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name off.test;
        merge_slashes off;
        location / { return 200 "named $uri"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;
        merge_slashes off;
        location = /a/b { return 200 "exact $uri"; }
        location ~ // { return 200 "double $uri"; }
        location / { return 200 "other $uri"; }
    }
}

EOF

$t->run();

sub get {
	my ($port, $uri, $host) = @_;
	my $r = http("GET $uri HTTP/1.0\nHost: " . ($host // 'localhost') . "\n\n",
		PeerAddr => '127.0.0.1:' . port($port));
	return $r =~ /\r\n\r\n(.*)$/s ? $1 : $r;
}

is(get(8080, '//a//b'), 'exact /a/b', 'merged by default');
is(get(8081, '//a//b'), 'double //a//b', 'merge_slashes off: kept for locations and $uri');
is(get(8081, '/a/b'), 'exact /a/b', 'a path without them');
is(get(8081, '/a//../b'), 'exact /a/b', '".." takes the empty segment away');
is(get(8081, '/a/.//b'), 'double /a//b', '"." still goes');
is(get(8081, '/a%2F%2Fb'), 'double /a//b', 'escaped slashes, decoded');
like(http("GET /../x HTTP/1.0\n\n", PeerAddr => '127.0.0.1:' . port(8081)),
	qr!^HTTP/1\.1 400 !, 'above the root is still a bad request');
is(get(8080, '//a//b', 'off.test'), 'named /a/b',
	'the address\'s default server decides, not the one Host names');

$t->stop();
