#!/usr/bin/perl

# disable_symlinks: off (the default) follows links out of the root; on
# refuses a link as the file (403, "openat() ... failed (40: Too many levels
# of symbolic links)") and as a directory on the way (404, "(20: Not a
# directory)": what Linux answers nginx's O_DIRECTORY|O_NOFOLLOW openat());
# if_not_owner refuses a link whose owner is not its target's; from= leaves
# the part of the path it names unchecked. Configuration errors with FILE:LINE.

use warnings;
use strict;

use Test::More;
use Cwd qw/realpath/;
use POSIX qw/getuid/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/);
my $d = $t->testdir();

plan(skip_all => 'test directory under a symlink') if realpath($d) ne $d;

$t->plan(23);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        root %%TESTDIR%%/www;

        location /off/ { alias %%TESTDIR%%/www/; }
        location /on/ { disable_symlinks on; alias %%TESTDIR%%/www/; }
        location /owner/ { disable_symlinks if_not_owner; alias %%TESTDIR%%/www/; }
        location /viafrom/ {
            disable_symlinks on from=$document_root;
            alias %%TESTDIR%%/wwwlink/;
        }
        location /via/ { disable_symlinks on; alias %%TESTDIR%%/wwwlink/; }
    }
}

EOF

mkdir("$d/www");
mkdir("$d/outside");
$t->write_file('www/file.html', 'local');
$t->write_file('outside/secret.txt', 'outside');
symlink('file.html', "$d/www/link") or die "symlink: $!";
symlink("$d/outside/secret.txt", "$d/www/out") or die "symlink: $!";
symlink("$d/outside", "$d/www/dirlink") or die "symlink: $!";
symlink("$d/www", "$d/wwwlink") or die "symlink: $!";

# A link whose owner is not its target's: as root, a link given to nobody;
# otherwise a link of ours to a system file (as nginx-tests does).
my $foreign;
if (getuid() == 0) {
	symlink('file.html', "$d/www/foreign") or die "symlink: $!";
	my $nobody = getpwnam('nobody') // 65534;
	POSIX::lchown($nobody, $nobody, "$d/www/foreign") or die "lchown: $!";
	$foreign = 1;
} else {
	my ($ext) = grep { -f && !-l && (stat())[4] != getuid() }
		('/etc/protocols', '/etc/services', '/etc/hostname');
	$foreign = symlink($ext, "$d/www/foreign") if $ext;
}

$t->run();

###############################################################################

sub get { http_get($_[0]) }
sub status { my ($r) = @_; $r =~ m!^HTTP/1\.1 (\d+)! ? $1 : 0 }
sub body { my ($r) = @_; $r =~ /\r\n\r\n(.*)\z/s ? $1 : undef }

is(body(get('/off/link')), 'local', 'off: link followed');
is(body(get('/off/out')), 'outside', 'off: link out of the root followed');
is(body(get('/off/dirlink/secret.txt')), 'outside', 'off: linked directory followed');

my $r = get('/on/file.html');
is(status($r) . ' ' . body($r), '200 local', 'on: plain file');
like(get('/on/link'), qr!^HTTP/1\.1 403 Forbidden!, 'on: link in the root');
like(get('/on/out'), qr!^HTTP/1\.1 403 Forbidden!, 'on: link out of the root');
like(get('/on/dirlink'), qr!^HTTP/1\.1 403 Forbidden!, 'on: link to a directory as the file');
like(get('/on/dirlink/secret.txt'), qr!^HTTP/1\.1 404 Not Found!, 'on: linked directory on the way');
like(get('/on/missing'), qr!^HTTP/1\.1 404 Not Found!, 'on: missing file');
like(get('/on/../on/file.html'), qr!^HTTP/1\.1 200 !, 'on: dot segments');

$r = get('/owner/link');
is(status($r) . ' ' . body($r), '200 local', 'if_not_owner: link of the same owner');
is(body(get('/owner/dirlink/secret.txt')), 'outside', 'if_not_owner: linked directory of the same owner');
SKIP: {
	skip 'no link of another owner', 1 unless $foreign;
	like(get('/owner/foreign'), qr!^HTTP/1\.1 403 Forbidden!, 'if_not_owner: link of another owner');
}

$r = get('/viafrom/file.html');
is(status($r) . ' ' . body($r), '200 local', 'from=$document_root: links in the root path followed');
like(get('/viafrom/link'), qr!^HTTP/1\.1 403 Forbidden!, 'from=$document_root: links under it refused');
like(get('/via/file.html'), qr!^HTTP/1\.1 404 !, 'without from=: the link in the root path refused');

my $log = $t->read_file('error.log');
like($log, qr!\[error\] .*openat\(\) "\Q$d\E/www/link" failed \(40: Too many levels of symbolic links\), client: 127\.0\.0\.1, server: , request: "GET /on/link HTTP/1\.0"!,
	'403 logged as nginx logs it');
like($log, qr!\[error\] .*openat\(\) "\Q$d\E/www/dirlink/secret\.txt" failed \(20: Not a directory\)!,
	'404 logged as nginx logs it');

# Configuration errors.
sub conf_error {
	my ($directive) = @_;
	$t->write_file('bad.conf', "events {}\nhttp {\n    $directive\n}\n");
	my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', 'bad.conf', '-e', 'stderr', '-t');
	return $rc ? $err : '';
}
like(conf_error('disable_symlinks yes;'), qr!\[emerg\] \d+#\d+: invalid parameter "yes" in \Q$d\E/bad\.conf:3!,
	'bad parameter');
like(conf_error('disable_symlinks off from=/a;'),
	qr!\[emerg\] \d+#\d+: "from=" cannot be used with "off" parameter in \Q$d\E/bad\.conf:3!, 'from= with off');
like(conf_error('disable_symlinks from=/a;'),
	qr!\[emerg\] \d+#\d+: "disable_symlinks" must have "off", "on" or "if_not_owner" parameter in \Q$d\E/bad\.conf:3!,
	'no mode');
like(conf_error('max_ranges many;'), qr!\[emerg\] \d+#\d+: "max_ranges" directive invalid number in \Q$d\E/bad\.conf:3!,
	'max_ranges: bad number');
$t->write_file('good.conf', "events {}\nhttp {\n    disable_symlinks if_not_owner from=\$document_root;\n    max_ranges 0;\n}\n");
my ($rc) = $t->run_binary('-p', "$d/", '-c', 'good.conf', '-e', 'stderr', '-t');
is($rc, 0, 'valid directives pass -t');

###############################################################################
