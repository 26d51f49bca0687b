#!/usr/bin/perl

# if_modified_since: exact (the default) gives 304 only for the file's own
# time, before also for a later one, off never; a bad value is refused
# with its file and line.

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
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        root %%TESTDIR%%;

        location /exact/ { }
        location /before/ { if_modified_since before; }
        location /off/ { if_modified_since off; }
    }
}

EOF

my $d = $t->testdir();
for my $dir (qw/exact before off/) {
	mkdir "$d/$dir";
	$t->write_file("$dir/f", 'file');
	utime 1764558147, 1764558147, "$d/$dir/f";
}
$t->run();

my $same = 'Mon, 01 Dec 2025 03:02:27 GMT';
my $later = 'Mon, 01 Dec 2025 04:00:00 GMT';

sub ims {
	my ($uri, $date) = @_;
	return http(<<EOF);
GET $uri HTTP/1.0
Host: localhost
If-Modified-Since: $date

EOF
}

like(ims('/exact/f', $same), qr/^HTTP\/1\.1 304 /, 'exact: same time');
like(ims('/exact/f', $later), qr/^HTTP\/1\.1 200 /, 'exact: later time');
like(ims('/before/f', $same), qr/^HTTP\/1\.1 304 /, 'before: same time');
like(ims('/before/f', $later), qr/^HTTP\/1\.1 304 /, 'before: later time');
like(ims('/before/f', 'Mon, 01 Dec 2025 03:00:00 GMT'), qr/^HTTP\/1\.1 200 /,
	'before: earlier time');
like(ims('/off/f', $same), qr/^HTTP\/1\.1 200 /, 'off');

$t->stop();
$t->write_file_expand('sluice.conf', <<'EOF');
%%TEST_GLOBALS%%
events {
}
http {
    if_modified_since sometimes;
}
EOF
my ($rc, undef, $err) = $t->run_binary('-t', '-p', "$d/", '-c', "$d/sluice.conf");
isnt($rc, 0, 'bad value refused');
like($err, qr/\[emerg\] invalid value "sometimes" in "if_modified_since" directive in \S+sluice\.conf:\d+$/m,
	'error names file and line');
