#!/usr/bin/perl

# auth_basic: 401 with WWW-Authenticate for no or wrong credentials, each
# htpasswd format nginx reads ({PLAIN}, {SHA}, {SSHA}, $apr1$, $1$, $5$,
# $6$, bcrypt $2y$, DES crypt), comments, nginx's error lines, the file read
# per request (an edit applies without reload), a missing file (403),
# auth_basic off in a location, a realm with variables, $remote_user, and
# satisfy all / any with allow and deny.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use MIME::Base64 qw/encode_base64/;
use Digest::SHA qw/sha1/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http auth_basic access/)->plan(37);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format u '$uri $remote_user';
    access_log %%TESTDIR%%/u.log u;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        root %%TESTDIR%%/html;

        auth_basic "Restricted area";
        auth_basic_user_file htpasswd;

        location / { }
        location /open/ { auth_basic off; }
        location /var/ { auth_basic "realm of $uri"; }
        location /missing/ { auth_basic_user_file %%TESTDIR%%/nope; }
        location /any/ { satisfy any; allow 127.0.0.2; deny all; }
        location /all/ { allow 127.0.0.2; deny all; }
    }
}

EOF

my $ssha = encode_base64(sha1('password' . 'salt') . 'salt', '');
$t->write_file('htpasswd', join("\n",
	'# bob:{PLAIN}password',
	'plain:{PLAIN}password',
	'sha:{SHA}' . encode_base64(sha1('password'), ''),
	"ssha:{SSHA}$ssha",
	'apr1:$apr1$abcdefgh$FBwExRW4dCc8aL.OvjpIE1',
	'md5:$1$abcdefgh$G//4keteveJp0qb8z2DxG/',
	'sha256:$5$abcdefgh$ZLdkj8mkc2XVSrPVjskDAgZPGjtj1VGVaa1aUkrMTU/',
	'sha512:$6$abcdefgh$yVfUwsw5T.JApa8POvClA1pQ5peiq97DUNyXCZN5IrF.BMSkiaLQ5kvpuEm/VQ1Tvh/KV2TcaWh8qinoW5dhA1',
	'bcrypt:$2y$05$nC6nErr9XZJuMJ57WyCob.EuZEjylDt2KaHfbfOtyb.EgL1I2jCVa',
	'des:bGVh02xkuGli2:a comment',
	"crlf:{PLAIN}password\r",
	'garbage:%%%',
	''));
mkdir "$d/html";
mkdir "$d/html/$_" for qw/open var missing any all/;
$t->write_file("html/$_", "secret\n") for qw(index.html open/index.html var/index.html
	missing/index.html any/index.html all/index.html);

$t->run();

###############################################################################

sub get {
	my ($uri, $cred, $src) = @_;
	my $auth = defined $cred ? 'Authorization: Basic ' . encode_base64($cred, '') . "\n" : '';
	my %o;
	if ($src) {
		$o{socket} = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080),
			LocalAddr => $src, Proto => 'tcp') or return "connect: $!";
	}
	return http("GET $uri HTTP/1.0\nHost: localhost\n$auth\n", %o);
}

sub code { $_[0] =~ /^HTTP\/1.1 (\d+)/ ? $1 : '' }

my $r = get('/');
is(code($r), 401, 'no credentials: 401');
like($r, qr/^WWW-Authenticate: Basic realm="Restricted area"\r$/m, 'the challenge');
like($r, qr/<title>401 Authorization Required<\/title>/, 'the 401 page');
ok($t->waitforlog(qr/\[info\] .*no user\/password was provided for basic authentication/),
	'no credentials: info line');

for my $u (qw/plain sha ssha apr1 md5 sha256 sha512 bcrypt des crlf/) {
	is(code(get('/', "$u:password")), 200, "$u: right password");
}
is(code(get('/', 'apr1:wrong')), 401, 'apr1: wrong password');
is(code(get('/', 'bcrypt:Password')), 401, 'bcrypt: wrong password');
is(code(get('/', 'sha:')), 401, 'empty password');
is(code(get('/', 'garbage:%%%')), 401, 'a field in no known format');
ok($t->waitforlog(qr/\[error\] .*user "apr1": password mismatch, client: 127\.0\.0\.1, server: localhost, request: "GET \/ HTTP\/1\.0"/),
	'mismatch line');

is(code(get('/', 'zed:password')), 401, 'unknown user');
ok($t->waitforlog(qr/\[error\] .*user "zed" was not found in "\Q$d\E\/htpasswd"/), 'not found line');
is(code(get('/', 'bob:password')), 401, 'a commented line is no user');
is(code(get('/', ':password')), 401, 'empty user');

# Read per request: an edit applies at once.
$t->write_file('htpasswd', "zed:{PLAIN}zz\n");
is(code(get('/', 'zed:zz')), 200, 'edited file: new user');
is(code(get('/', 'plain:password')), 401, 'edited file: old user gone');
$t->write_file('htpasswd', "plain:{PLAIN}password\n");

is(code(get('/open/')), 200, 'auth_basic off');
like(get('/var/'), qr/realm="realm of \/var\/"/, 'realm with variables');

$r = get('/missing/', 'plain:password');
is(code($r), 403, 'missing file: 403');
ok($t->waitforlog(qr/\[error\] .*open\(\) "\Q$d\E\/nope" failed \(2: No such file or directory\)/),
	'missing file line');

# satisfy.
is(code(get('/any/', undef, '127.0.0.2')), 200, 'any: allowed address, no credentials');
is(code(get('/any/', undef, '127.0.0.1')), 401, 'any: denied address, no credentials');
is(code(get('/any/', 'plain:password', '127.0.0.1')), 200, 'any: denied address, credentials');
is(code(get('/all/', undef, '127.0.0.2')), 401, 'all: allowed address, no credentials');
is(code(get('/all/', 'plain:password', '127.0.0.2')), 200, 'all: both');
is(code(get('/all/', 'plain:password', '127.0.0.1')), 403, 'all: denied address');

my $log = '';
poll_until(sub { $log = $t->read_file('u.log'); $log =~ m{^/all/ plain$}m }, 5);
like($log, qr{^/ apr1$}m, '$remote_user, even on mismatch');
like($log, qr{^/open/ -$}m, '$remote_user empty');

###############################################################################
