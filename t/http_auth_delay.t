#!/usr/bin/perl

# auth_delay: a 401 of auth_basic (or auth_request) waits auth_delay before
# it is sent; the right password and a 403 of deny do not wait.

use warnings;
use strict;

use Test::More;
use MIME::Base64;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http auth_basic access/)->plan(7);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        auth_delay 1s;
        root %%TESTDIR%%/html;

        location /basic {
            auth_basic "area";
            auth_basic_user_file %%TESTDIR%%/htpasswd;
        }
        # Far longer than any request here may take: a response that came
        # back at all did not wait for it.
        location /deny { auth_delay 60s; deny all; }
        location /fine {
            auth_delay 60s;
            auth_basic "area";
            auth_basic_user_file %%TESTDIR%%/htpasswd;
        }
        location /nodelay {
            auth_delay 0;
            auth_basic "area";
            auth_basic_user_file %%TESTDIR%%/htpasswd;
        }
    }
}

EOF

$t->write_file('htpasswd', "user:{PLAIN}secret\n");
mkdir($t->testdir . '/html');
$t->write_file("html/$_", 'in') for qw(basic fine deny nodelay);
$t->run();

my $good = encode_base64('user:secret', '');
my $bad = encode_base64('user:wrong', '');

sub get {
	my ($uri, $auth) = @_;
	my $h = defined $auth ? "Authorization: Basic $auth\n" : '';
	return http("GET $uri HTTP/1.0\nHost: localhost\n$h\n", timeout => 20);
}

my $start = time();
my $r = get('/basic', $bad);
my $took = time() - $start;
like($r, qr!^HTTP/1\.1 401 !, 'a wrong password: 401');
like($r, qr!^WWW-Authenticate: Basic realm="area"\r$!m, 'with its challenge');
cmp_ok($took, '>=', 0.95, 'sent after auth_delay at the earliest');

$start = time();
get('/basic');
cmp_ok(time() - $start, '>=', 0.95, 'no credentials: delayed too');

like(get('/fine', $good), qr!^HTTP/1\.1 200 .*\r\n\r\nin$!s, 'the right password does not wait');
like(get('/deny'), qr!^HTTP/1\.1 403 !, 'a 403 of deny does not wait');
like(get('/nodelay', $bad), qr!^HTTP/1\.1 401 !, 'auth_delay 0');

$t->stop();
