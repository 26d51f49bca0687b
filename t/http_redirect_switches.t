#!/usr/bin/perl

# absolute_redirect, port_in_redirect, server_name_in_redirect: how the
# redirects sluice makes itself (return, rewrite redirect|permanent, the
# trailing-slash 301 of a proxy_pass location, a directory without its
# slash, a Location proxy_redirect rewrote) name their host and port, as
# nginx's header filter completes a relative Location.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(16);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    port_in_redirect off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name primary.test other.test;
        root %%TESTDIR%%/html;
        port_in_redirect on;

        location /ret { return 301 /t$is_args$args; }
        location /noport { port_in_redirect off; return 302 /t; }
        location /name { server_name_in_redirect on; return 302 /t; }
        location /rel { absolute_redirect off; return 302 /t; }
        location /url { absolute_redirect off; return 302 http://example.com/u; }
        location /rw { rewrite ^/rw/(.*)$ /new/$1 permanent; }
        location /rwrel { absolute_redirect off; rewrite ^ /new redirect; }
        location /pp/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/two/; }
        location /pprel/ {
            absolute_redirect off;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/two/;
        }
        location /ppname/ {
            server_name_in_redirect on;
            port_in_redirect off;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/two/;
        }
        location /dir { server_name_in_redirect on; }
        location /reldir { absolute_redirect off; alias %%TESTDIR%%/html/dir; }
    }

    server {
        listen 127.0.0.1:%%PORT_8082%%;
        server_name inherit.test;
        location / { return 302 /t; }
    }
}

EOF

mkdir($t->testdir . '/html');
mkdir($t->testdir . '/html/dir');
$t->backend(port(8081));
$t->run();
my $p = port(8080);

sub loc {
	my ($r) = @_;
	return $r =~ /^Location: (.*?)\r$/m ? $1 : 'none';
}

sub req {
	my ($uri, $host) = @_;
	return http("GET $uri HTTP/1.0\nHost: $host\n\n");
}

is(loc(req('/ret?a=1', 'other.test:1234')), "http://other.test:$p/t?a=1",
	'the Host without its port, the port the request came to');
is(loc(http("GET /ret HTTP/1.0\n\n")), "http://127.0.0.1:$p/t",
	'no Host: the address the request came to');
is(loc(http("GET http://abs.test:77/ret HTTP/1.1\nHost: other.test\nConnection: close\n\n")),
	"http://abs.test:$p/t", 'an absolute request URI names the host');
is(loc(req('/noport', 'other.test')), 'http://other.test/t', 'port_in_redirect off');
is(loc(req('/name', 'other.test')), "http://primary.test:$p/t",
	'server_name_in_redirect on: the first server_name');
is(loc(req('/rel', 'other.test')), '/t', 'absolute_redirect off: the path as is');
is(loc(req('/url', 'other.test')), 'http://example.com/u', 'a URL is never touched');
is(loc(req('/rw/x', 'other.test')), "http://other.test:$p/new/x", 'rewrite permanent');
is(loc(req('/rwrel', 'other.test')), '/new', 'rewrite redirect, absolute_redirect off');
is(loc(req('/pp?b=2', 'other.test')), "http://other.test:$p/pp/?b=2",
	'the trailing-slash 301 of a proxy_pass location');
is(loc(req('/pprel', 'other.test')), '/pprel/', 'the same, absolute_redirect off');
is(loc(req('/dir', 'other.test')), "http://primary.test:$p/dir/",
	'a directory without its slash, server_name_in_redirect on');
is(loc(req('/reldir', 'other.test')), '/reldir/', 'the same, absolute_redirect off');
is(loc(req('/pprel/redir', 'other.test')), '/pprel/target',
	'a Location proxy_redirect rewrote, absolute_redirect off');
is(loc(req('/ppname/redir', 'other.test')), 'http://primary.test/ppname/target',
	'the same, server_name_in_redirect on, port_in_redirect off');
is(loc(http("GET / HTTP/1.0\nHost: inherit.test\n\n", PeerAddr => '127.0.0.1:' . port(8082))),
	'http://inherit.test/t', 'port_in_redirect off inherited from http');

$t->stop();
