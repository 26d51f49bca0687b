#!/usr/bin/perl

# fastcgi_pass to a FastCGI responder in the test (t/lib/Test/Sluice/FastCGI.pm):
# the params of Debian's fastcgi_params, fastcgi.conf and snippets/fastcgi-php.conf
# (copied in from the installed nginx-common), HTTP_* request headers, request
# bodies (Content-Length and chunked) as FCGI_STDIN, Status and Location, stderr
# in error.log, fastcgi_next_upstream between two responders, intercept_errors
# with error_page, read timeouts, keep_conn reuse, an address in a variable,
# a unix socket.

use warnings;
use strict;

use Test::More;
use File::Copy qw/copy/;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $etc = '/etc/nginx';
plan(skip_all => "no Debian nginx configuration in $etc")
	unless -f "$etc/fastcgi_params" && -f "$etc/fastcgi.conf" && -f "$etc/snippets/fastcgi-php.conf";

my $t = Test::Sluice->new()->has(qw/http/)->plan(46);
my $d = $t->testdir();
chmod 0755, $d;
# Beside sluice.conf, as in /etc/nginx: fastcgi-php.conf includes
# fastcgi.conf by a relative name.
mkdir "$d/snippets";
copy("$etc/$_", "$d/$_") or die "copy $_: $!\n" for qw/fastcgi_params fastcgi.conf/;
copy("$etc/snippets/fastcgi-php.conf", "$d/snippets/") or die "copy: $!\n";
mkdir "$d/www";
for my $f (qw/index.php info.php/) {
	open my $fh, '>', "$d/www/$f" or die "$f: $!\n";
	print $fh "<?php ?>\n";
	close $fh;
}
$t->write_file('err.html', "intercepted\n");

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format up '$request_uri $status [$upstream_addr] [$upstream_status]';
    access_log %%TESTDIR%%/access.log up;
    root %%TESTDIR%%/www;

    upstream two { server 127.0.0.1:%%PORT_8084%% max_fails=0; server 127.0.0.1:%%PORT_8083%%; }
    upstream both { server 127.0.0.1:%%PORT_8082%%; server 127.0.0.1:%%PORT_8083%%; }
    upstream kept { server 127.0.0.1:%%PORT_8083%%; keepalive 4; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location / {
            include %%TESTDIR%%/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_param EXTRA "";
            fastcgi_param MAYBE "" if_not_empty;
            fastcgi_index index.php;
            fastcgi_pass 127.0.0.1:%%PORT_8082%%;
        }
        location ~ [^/]\.php(/|$) {
            include %%TESTDIR%%/snippets/fastcgi-php.conf;
            fastcgi_pass 127.0.0.1:%%PORT_8082%%;
        }
        location /iff/ {
            include %%TESTDIR%%/fastcgi.conf;
            if ($arg_f) { fastcgi_pass 127.0.0.1:%%PORT_8082%%; break; }
            return 204;
        }
        location /cf/ {
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass 127.0.0.1:%%PORT_8082%%;
            fastcgi_pass_request_headers off;
        }
        location /two/ {
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass two;
            fastcgi_next_upstream error timeout http_500;
        }
        location /both/ {
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass both;
            fastcgi_next_upstream error timeout http_500;
        }
        location /intercept/ {
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass 127.0.0.1:%%PORT_8083%%;
            fastcgi_intercept_errors on;
            error_page 502 503 /err.html;
        }
        location = /err.html { root %%TESTDIR%%; }
        location /slow/ {
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass 127.0.0.1:%%PORT_8083%%;
            fastcgi_read_timeout 300ms;
        }
        location /keep/ {
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass kept;
            fastcgi_keep_conn on;
        }
        location /var/ {
            set $where 127.0.0.1:%%PORT_8083%%;
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass $where;
        }
        location /nobuf/ {
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass 127.0.0.1:%%PORT_8082%%;
            fastcgi_request_buffering off;
        }
        location /nobody/ {
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass 127.0.0.1:%%PORT_8082%%;
            fastcgi_pass_request_body off;
        }
        location /http/ {
            fastcgi_pass 127.0.0.1:%%PORT_8085%%;
        }
        location /unix/ {
            include %%TESTDIR%%/fastcgi.conf;
            fastcgi_pass unix:%%TESTDIR%%/fcgi.sock;
        }
    }
}

EOF

my ($p2, $p3, $p4) = (port(8082), port(8083), port(8084));
$t->fastcgi($p2);
$t->fastcgi($p3);
$t->fastcgi("$d/fcgi.sock");
# Answers HTTP at once to whatever connects: no FastCGI application.
my $http_port = port(8085);
$t->run_daemon(sub {
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$http_port", Listen => 16, ReuseAddr => 1)
		or die "http: $!\n";
	local $SIG{TERM} = sub { exit 0 };
	while (my $c = $l->accept()) {
		print $c "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
		close $c;
	}
});
$t->waitforsocket("127.0.0.1:$http_port");
$t->run();

my $r = http_get('/dir/?a=1');
like($r, qr/^HTTP\/1\.1 200 OK\r\n/, 'answered');
like($r, qr/^X-Port: $p2\r$/m, 'the header from the application');
like($r, qr/^SCRIPT_FILENAME=$d\/www\/dir\/index\.php$/m, 'fastcgi_index after a / name');
like($r, qr/^QUERY_STRING=a=1$/m, 'QUERY_STRING');
like($r, qr/^REQUEST_METHOD=GET$/m, 'REQUEST_METHOD');
like($r, qr/^REQUEST_URI=\/dir\/\?a=1$/m, 'REQUEST_URI');
like($r, qr/^SERVER_PORT=@{[port(8080)]}$/m, 'SERVER_PORT');
like($r, qr/^HTTP_HOST=localhost$/m, 'HTTP_HOST');
like($r, qr/^EXTRA=$/m, 'an empty param is sent');
unlike($r, qr/^MAYBE=/m, '... but not with if_not_empty');

$r = http("GET /hdr/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Some-Thing: v1\r\nX-Some-Thing: v2\r\n\r\n");
like($r, qr/^HTTP_X_SOME_THING=v1, v2$/m, 'request headers as HTTP_*, repeated ones joined');
# fastcgi_pass in an if, as nginx takes it: the location's params, the
# if's pass.
$r = http_get('/iff/x?f=1');
like($r, qr/^X-Port: $p2\r$/m, 'fastcgi_pass in an if: the application answers');
like($r, qr/^REQUEST_URI=\/iff\/x\?f=1$/m, 'fastcgi_pass in an if: the location\'s params');
like(http_get('/iff/x'), qr/^HTTP\/1\.1 204 /, 'fastcgi_pass in an if: not taken when it does not hold');

$r = http("GET /cf/x HTTP/1.0\r\nHost: localhost\r\nX-Some-Thing: v1\r\n\r\n");
unlike($r, qr/^HTTP_X_SOME_THING/m, 'fastcgi_pass_request_headers off');
like($r, qr/^SCRIPT_FILENAME=$d\/www\/cf\/x$/m, 'fastcgi.conf SCRIPT_FILENAME');

$r = http_get('/info.php/some/path');
like($r, qr/^SCRIPT_NAME=\/info\.php$/m, 'fastcgi_split_path_info: the script');
like($r, qr/^PATH_INFO=\/some\/path$/m, '... and the path info (Debian fastcgi-php.conf)');
like(http_get('/missing.php'), qr/^HTTP\/1\.1 404/, 'try_files $fastcgi_script_name =404');

$r = http("POST /body/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 5\r\nContent-Type: text/x\r\n\r\nhello");
like($r, qr/^stdin=hello$/m, 'a request body as FCGI_STDIN');
like($r, qr/^CONTENT_LENGTH=5$/m, 'CONTENT_LENGTH');
like($r, qr/^CONTENT_TYPE=text\/x$/m, 'CONTENT_TYPE');
$r = http("POST /body/ HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
like($r, qr/^stdin=abcde$/m, 'a chunked body');
like($r, qr/^CONTENT_LENGTH=5$/m, '... with its length');
# More than fastcgi_buffers hold: streamed, chunked to an HTTP/1.1 client.
$r = http("GET /big/?big=200000 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
like($r, qr/^Transfer-Encoding: chunked\r$/m, 'chunked to an HTTP/1.1 client without Content-Length');
$r = http("POST /nobuf/ HTTP/1.0\r\nHost: localhost\r\nContent-Length: 4\r\n\r\nwxyz");
like($r, qr/^stdin=wxyz$/m, 'fastcgi_request_buffering off: the body still goes');
$r = http("POST /nobody/ HTTP/1.0\r\nHost: localhost\r\nContent-Length: 4\r\n\r\nwxyz");
like($r, qr/^stdin=$/m, 'fastcgi_pass_request_body off');
$r = http_get('/big/?big=200000');
is(length(($r =~ /^stdin=\n(x*)/m)[0] // ''), 200000, 'a body of many records');

like(http_get('/x/?status=404'), qr/^HTTP\/1\.1 404 /, 'Status header');
like(http_get('/x/?location=/y'), qr/^HTTP\/1\.1 302 .*^Location: \/y\r$/ms, 'Location without Status is 302');

http_get('/x/?stderr=php_oops');
ok($t->waitforlog(qr/\[error\].*FastCGI sent in stderr: "php_oops" while reading response header from upstream.*upstream: "fastcgi:\/\/127\.0\.0\.1:$p2"/),
	'stderr in error.log as nginx writes it');

like(http_get('/two/?a=1'), qr/^X-Port: $p3\r$/m, 'fastcgi_next_upstream: the dead one, then the next');
like(http_get('/x/?late=php_late'), qr/^tail$/m, 'stderr after the head: the body goes on');
ok($t->waitforlog(qr/\[error\].*FastCGI sent in stderr: "php_late" while reading upstream/),
	'... and the stderr is logged');

my %ports;
for (1 .. 4) {
	my ($p) = http_get("/both/?fail_on=$p2") =~ /^X-Port: (\d+)\r$/m;
	$ports{$p // 'none'}++;
}
is_deeply(\%ports, { $p3 => 4 }, 'fastcgi_next_upstream http_500: the other responder answers');
ok($t->waitforlog(qr/\/both\/\?fail_on=$p2 200 \[127\.0\.0\.1:$p2, 127\.0\.0\.1:$p3\] \[500, 200\]/, 5, 'access.log'),
	'... after the 500 of the first');
like(http_get('/intercept/?status=503'), qr/intercepted/, 'fastcgi_intercept_errors with error_page');
like(http_get('/slow/?slow=2'), qr/^HTTP\/1\.1 504 /, 'fastcgi_read_timeout: 504');
like(http_get('/var/'), qr/^X-Port: $p3\r$/m, 'an address in a variable');
like(http_get('/unix/'), qr/^X-Port: $d\/fcgi\.sock\r$/m, 'a unix socket');

# An HTTP server is no FastCGI application.
like(http_get('/http/'), qr/^HTTP\/1\.1 502 /, 'an answer that is not FastCGI: 502');
ok($t->waitforlog(qr/\[error\].*upstream sent unsupported FastCGI protocol version: 72 while reading response header from upstream/),
	'... logged as nginx logs it');

# Bad lines, with file and line.
$t->write_file('bad.conf', "events {}\nhttp {\n server {\n  location / {\n   fastcgi_split_path_info ^(.+)\$;\n  }\n }\n}\n");
my (undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', "$d/bad.conf", '-t');
like($err, qr/pattern "\^\(\.\+\)\$" must have 2 captures in \S*bad\.conf:5/, 'fastcgi_split_path_info without two captures');
$t->write_file('bad.conf', "events {}\nhttp {\n fastcgi_keep_conn maybe;\n}\n");
(undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', "$d/bad.conf", '-t');
like($err, qr/invalid value "maybe" in "fastcgi_keep_conn" directive, it must be "on" or "off" in \S*bad\.conf:3/, 'fastcgi_keep_conn maybe');

my ($c1) = http_get('/keep/') =~ /conn=(\d+) keep=1/;
my ($c2) = http_get('/keep/') =~ /conn=(\d+) keep=1/;
ok(defined $c1 && defined $c2 && $c1 == $c2, 'fastcgi_keep_conn: the connection is reused');

ok($t->waitforlog(qr/\/two\/\?a=1 200 \[127\.0\.0\.1:$p4, 127\.0\.0\.1:$p3\] \[502, 200\]/, 5, 'access.log'),
	'$upstream_addr and $upstream_status of both tries');
