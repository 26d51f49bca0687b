#!/usr/bin/perl

# HTTP server: server by address and server_name, locations by nginx's rules,
# return with text, variables, redirects, 444, nginx's status lines and pages.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(22);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    server {
        listen       127.0.0.1:%%PORT_8080%%;
        server_name  localhost;

        location / { return 200 "root $uri $arg_a\n"; }
        location = /exact { return 200 exact; }
        location /docs/ {
            return 200 docs;
            location /docs/old/ { return 200 docs-old; }
            location ~ \.txt$ { return 200 docs-txt; }
        }
        location ^~ /static/ { return 200 static; }
        location ~ \.png$ { return 200 png; }
        location ~* \.JPG$ { return 200 jpg; }
        location /redirect { return 302 /target; }
        location /moved { return 301 http://example.com/x; }
        location /url { return https://example.org/; }
        location /close { return 444; }
        location /notfound { return 404; }
        location /unavail { return 503; }
        location /vars {
            return 200 "$request_method $request_uri $host $server_port $remote_addr $server_protocol";
        }
    }

    server {
        listen       127.0.0.1:%%PORT_8080%%;
        server_name  *.example.com;
        return 200 "wildcard $host";
    }

    server {
        listen       127.0.0.1:%%PORT_8080%%;
        server_name  ~^(www\d+)\.example\.net$;
        return 200 regex;
    }

    server {
        listen       127.0.0.1:%%PORT_8081%% default_server;
        listen       127.0.0.1:%%PORT_8080%%;
        server_name  second;
        return 200 second;
    }
}

EOF

$t->run();

my $p = port(8080);

sub get_host {
	my ($host, $uri) = @_;
	return http("GET $uri HTTP/1.0\nHost: $host\n\n");
}

like(http_get('/x?a=1'), qr!^HTTP/1\.1 200 OK\r\n.*\r\n\r\nroot /x 1\n$!s, 'prefix /');
like(http_get('/a/../b//c'), qr!root /b/c!, 'normalized uri');
like(http_get('/exact'), qr!\r\n\r\nexact$!, 'exact');
like(http_get('/docs/a'), qr!\r\n\r\ndocs$!, 'prefix');
like(http_get('/docs/old/a'), qr!\r\n\r\ndocs-old$!, 'nested prefix');
like(http_get('/docs/a.txt'), qr!\r\n\r\ndocs-txt$!, 'nested regex first');
like(http_get('/static/a.png'), qr!\r\n\r\nstatic$!, '^~ stops regexes');
like(http_get('/img/a.png'), qr!\r\n\r\npng$!, 'regex');
like(http_get('/img/A.jpg'), qr!\r\n\r\njpg$!, 'caseless regex');

like(http_get('/redirect'), qr!^HTTP/1\.1 302 Moved Temporarily\r\n.*Location: http://localhost:$p/target\r\n!s,
	'relative redirect made absolute');
like(http_get('/moved'), qr!^HTTP/1\.1 301 Moved Permanently\r\n.*Location: http://example\.com/x\r\n.*<center><h1>301 Moved Permanently</h1></center>!s,
	'301 with page');
like(http_get('/url'), qr!^HTTP/1\.1 302 .*Location: https://example\.org/\r\n!s, 'return URL');
is(http_get('/close'), '', '444 closes without response');
like(http_get('/notfound'), qr!^HTTP/1\.1 404 Not Found\r\n.*Server: sluice/.*<title>404 Not Found</title>!s,
	'404 page');
like(http_get('/unavail'), qr!^HTTP/1\.1 503 Service Temporarily Unavailable\r\n!, 'nginx reason phrase');
like(http_get('/vars?q=1'), qr!\r\n\r\nGET /vars\?q=1 localhost $p 127\.0\.0\.1 HTTP/1\.0$!, 'variables');

like(get_host('a.b.example.com', '/'), qr!\r\n\r\nwildcard a\.b\.example\.com$!, 'wildcard name');
like(get_host('www7.example.net', '/'), qr!\r\n\r\nregex$!, 'regex name');
like(get_host('second', '/'), qr!\r\n\r\nsecond$!, 'exact name');
like(get_host('unknown', '/'), qr!\r\n\r\nroot /!, 'first server is the default');
like(http_get('/', PeerAddr => '127.0.0.1:' . port(8081)), qr!\r\n\r\nsecond$!, 'by address');

# HTTP/1.1 keep-alive: two requests on one connection.
my $r = http(<<EOF);
GET /exact HTTP/1.1
Host: localhost

GET /after HTTP/1.1
Host: localhost
Connection: close

EOF
like($r, qr!exact.*HTTP/1\.1 200 OK.*root /after!s, 'keep-alive');
