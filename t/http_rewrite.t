#!/usr/bin/perl

# The rewrite module: rewrite (flags, captures, arguments), if (=, !=, ~, ~*,
# -f, truthiness), set, break, return among them, server-level rewrites,
# rewrite_log, the cycle guard, and a rewritten URI sent to an upstream.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http rewrite/)->plan(26);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        root %%TESTDIR%%;

        rewrite ^/old/(.*)$ /new/$1 last;

        location /new/ { return 200 "new $uri $args"; }
        location /last/ { rewrite ^/last/(\w+)$ /target/$1?x=1 last; return 500; }
        location /target/ { return 200 "target $uri $args"; }
        location /break/ {
            rewrite ^ /elsewhere break;
            return 200 "after break $uri";
        }
        location /noargs/ { rewrite ^ /target/q? last; }
        location /redirect/ { rewrite ^/redirect/(.*)$ /target/$1 redirect; }
        location /permanent/ { rewrite ^ http://example.com/p permanent; }
        location /set/ {
            set $who "a $request_method";
            set $who "$who!";
            return 200 "who=$who";
        }
        location /if/ {
            if ($arg_x = yes) { return 200 "x is yes"; }
            if ($arg_x != no) { return 200 "x is not no"; }
            return 200 "x is no";
        }
        location /re/ {
            if ($http_user_agent ~* ^(\w+)/) { return 200 "agent $1"; }
            return 200 "no agent";
        }
        location /file/ {
            if (-f $request_filename) { return 200 "exists"; }
            return 200 "missing";
        }
        location /truthy/ {
            set $flag $arg_f;
            if ($flag) { return 200 "on"; }
            return 200 "off";
        }
        location /loop/ { rewrite ^ /loop/again last; }
        location /logged/ { rewrite_log on; rewrite ^/logged/(.*) /target/$1 last; }
        location /unset/ { return 200 "[$never_set]"; }
        location /unset-quiet/ { uninitialized_variable_warn off; return 200 "[$never_set]"; }
        location /setter { set $never_set x; }
        location /argcap/ { rewrite ^/argcap/(.*)$ /target/q?p=$1 last; }
        location /pathcap/ { rewrite ^/pathcap/(.*)$ /target/$1 last; }
        location ~ ^/loccap/(?<first>[^/]+)/(.*)$ { return 200 "loc $first $1 $2"; }
        location /ifcap/ {
            if ($uri ~ ^/ifcap/(?<n>\d+)) { return 200 "if $n $1"; }
        }
    }
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name ~^(?<sub>[a-z]+)\.example$;
        return 200 "sub $sub $1";
    }
}

EOF

$t->write_file('present', 'x');
$t->run();

like(http_get('/old/a?b=1'), qr!new /new/a b=1$!, 'server-level rewrite ... last');
like(http_get('/last/abc?y=2'), qr!target /target/abc x=1&y=2$!, 'last with captures, new arguments first');
# break skips the rest of the rewrite directives (the return too), and the
# static handler looks for the new URI.
like(http_get('/break/x'), qr!^HTTP/1\.1 404 !, 'break stops rewrite processing');
like($t->read_file('error.log'), qr!open\(\) "\Q$d\E/elsewhere" failed!, 'the rewritten URI was served');
like(http_get('/noargs/x?y=2'), qr!target /target/q $!, 'trailing ? drops the arguments');
like(http_get('/redirect/z?k=v'), qr!^HTTP/1\.1 302 .*Location: http://localhost:\d+/target/z\?k=v\r\n!s, 'redirect flag');
like(http_get('/permanent/'), qr!^HTTP/1\.1 301 .*Location: http://example\.com/p\r\n!s, 'permanent to a URL');
like(http_get('/set/'), qr!who=a GET\!$!, 'set, reading itself');
like(http_get('/if/?x=yes'), qr!x is yes$!, 'if =');
like(http_get('/if/?x=maybe'), qr!x is not no$!, 'if !=');
like(http_get('/if/?x=no'), qr!x is no$!, 'fall through');
like(http("GET /re/ HTTP/1.0\nHost: localhost\nUser-Agent: Curl/8\n\n"), qr!agent Curl$!, 'if ~* with a capture');
like(http_get('/truthy/?f=1'), qr!on$!, 'if ($var) true');
like(http_get('/truthy/?f=0'), qr!off$!, 'if ($var) false for 0');
like(http_get('/loop/'), qr!^HTTP/1\.1 500 !, 'rewrite cycle stopped with 500');
http_get('/logged/q');
like($t->read_file('error.log'), qr!\[notice\] .*"\^/logged/\(\.\*\)" matches "/logged/q", rewritten to "/target/q"!, 'rewrite_log');
like(http_get('/unset-quiet/'), qr!\[\]$!, 'an unset variable is empty');
unlike($t->read_file('error.log'), qr!uninitialized!, 'uninitialized_variable_warn off: no warning');
http_get('/unset/');
like($t->read_file('error.log'), qr!\[warn\] .*using uninitialized "never_set" variable!, 'warning by default');

# A capture in a rewrite's arguments is escaped when the client escaped
# (nginx's quoted_uri): %26 stays one argument's. A ? a capture brings
# stays in the path.
like(http_get('/argcap/a%26b=c'), qr!target /target/q p=a%26b=c$!, 'capture escaped in the arguments');
like(http_get('/argcap/a&b=c'), qr!target /target/q p=a&b=c$!, 'not escaped when the client did not');
like(http_get('/pathcap/a%3Fb?c=1'), qr!target /target/a\?b c=1$!, 'a ? from a capture stays in the path');
# Captures of a regex location (numbered and named), of an if, of a regex
# server name.
like(http_get('/loccap/x/y/z'), qr!loc x x y/z$!, 'a regex location\'s captures');
like(http_get('/ifcap/42'), qr!if 42 42$!, 'an if\'s named capture');
like(http("GET / HTTP/1.0\nHost: abc.example\n\n"), qr!sub abc abc$!, 'a regex server name\'s captures');
like(http_get('/loccap/%41/b%2Fc'), qr!loc A A b/c$!, 'captures of the decoded URI');
