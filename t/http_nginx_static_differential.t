#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) serving the same files:
# a table of requests (methods, ranges, preconditions, directories with and
# without their slash, index and autoindex, alias, try_files, escapes, a
# symlink, `etag off`, a `return 200`) goes to both, and the status, the
# fields a client reads (length, range, type, tag, date, Accept-Ranges,
# Location, Allow) and the body must be the same. The tag of the first
# answer stands for ETAG in later requests.
#
# Left out, or made the same, as sluice.conf(5) says: the server's name in
# pages, a multipart boundary's number (a counter in both), and how an
# autoindex listing is framed (nginx chunks it, sluice sends its length).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside beside_table/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);
my $d = $t->testdir();
mkdir "$d/www/$_" for '', 'dir', 'empty', 'idx', "d\xe9", 'd i#r?"<^{';
$t->write_file('www/a.txt', join('', map { chr(97 + $_ % 26) } 0 .. 999));
$t->write_file('www/dir/b.html', '<p>b</p>');
$t->write_file('www/idx/index.html', 'index');
$t->write_file("www/caf\xc3\xa9.txt", 'cafe');
$t->write_file('www/sp ace.txt', 'space');
mkdir "$d/www/vs";
$t->write_file('www/vs/v.txt', 'vs');
# Names that are not UTF-8 (Latin-1), asked for percent-encoded.
$t->write_file("www/lat\xe9.txt", 'latin');
$t->write_file("www/d\xe9/\xff", 'ff');
$t->write_file('www/x.json', '{}');
$t->write_file('www/noext', 'noext');
symlink("$d/www/a.txt", "$d/www/link.txt");

nginx_beside($t, <<"EOF");
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        root $d/www;
        location /al/ { alias $d/www/dir/; }
        location /tf/ { try_files \$uri \$uri/ /a.txt; }
        location /ai/ { alias $d/www/; autoindex on; }
        location /et/ { alias $d/www/; etag off; }
        location /ret { return 200 "ret"; }
        set \$sub www;
        location ~ ^/img/(.+\\.txt)\$ { alias $d/www/\$1; }
        location ~ ^/rx/ { alias $d/www/dir/b.html; }
        location /vs/ { root $d/\$sub; }
        location /va/ { alias $d/\$sub/dir/; }
        location /dr/ { root $d/\$sub; return 200 "\$document_root|\$request_filename"; }
        location ~ ^/tfa/(.*)\$ { alias $d/www/; try_files \$1 /a.txt; }
    }
EOF

my $old = 'Thu, 01 Jan 1970 00:00:00 GMT';
my $later = 'Thu, 01 Jan 2099 00:00:00 GMT';
my @req = (
	['/a.txt'], ['/a.txt', 'Range: bytes=0-9'], ['/a.txt', 'Range: bytes=-5'],
	['/a.txt', 'Range: bytes=990-'], ['/a.txt', 'Range: bytes=995-2000'],
	['/a.txt', 'Range: bytes=1000-'], ['/a.txt', 'Range: bytes=5-2'],
	['/a.txt', 'Range: bytes=0-1,5-6'], ['/a.txt', 'Range: bytes=x'],
	['/a.txt', 'Range: items=0-1'], ['/a.txt', 'Range: bytes=0-0,-1'],
	['/a.txt', 'Range: bytes= 0-1'], ['/a.txt', 'Range: bytes=-0'], ['/a.txt', 'Range: bytes=0-'],
	['/a.txt', 'Range: bytes=00-01'], ['/a.txt', "If-Modified-Since: $later"],
	['/a.txt', "If-Modified-Since: $old"], ['/a.txt', 'If-Modified-Since: garbage'],
	['/a.txt', 'If-None-Match: *'], ['/a.txt', 'If-None-Match: "x"'],
	['/a.txt', 'If-None-Match: ETAG'], ['/a.txt', 'If-None-Match: W/ETAG'],
	['/a.txt', 'If-None-Match: ETAG', "If-Modified-Since: $old"],
	['/a.txt', 'If-Match: "x"'], ['/a.txt', 'If-Match: *'], ['/a.txt', 'If-Match: ETAG'],
	['/a.txt', 'If-Match: W/ETAG'], ['/a.txt', 'If-Match: "y", ETAG'],
	['/a.txt', 'If-Match: "y" , ETAG , "z"'], ['/a.txt', 'If-Match: "x"', 'Range: bytes=0-1'],
	['/a.txt', 'If-Match: "x"', 'If-None-Match: *'], ['/a.txt', 'If-Match: *', 'If-None-Match: *'],
	['/a.txt', "If-Unmodified-Since: $old"], ['/a.txt', "If-Unmodified-Since: $later"],
	['/a.txt', 'If-Unmodified-Since: junk'], ['/a.txt', 'If-Range: "x"', 'Range: bytes=0-1'],
	['/a.txt', "If-Range: $old", 'Range: bytes=0-1'], ['/a.txt', 'If-Range: ETAG', 'Range: bytes=0-1'],
	['/dir'], ['/dir/'], ['/dir/b.html'], ['/idx/'], ['/idx'], ['/empty/'], ['/missing'],
	['/img/a.txt'], ['/img/dir/x.txt'], ['/img/none.txt'], ['/rx/anything'],
	['/vs/v.txt'], ['/vs/'], ['/va/b.html'], ['/va/'], ['/dr/x'], ['/tfa/noext'], ['/tfa/none'],
	['/caf%C3%A9.txt'], ['/lat%E9.txt'], ['/lat%e9.txt', 'Range: bytes=1-2'], ['/tf/lat%E9.txt'],
	['/d%E9'], ['/d%E9/'], ['/d%E9/%FF'], ['/ai/d%E9/'], ['/d%20i%23r%3F%22%3C%5E%7B'],
	['/d%20i%23r%3F%22%3C%5E%7B?a=%20'], ['/lat%C3%A9.txt'], ['/sp%20ace.txt'], ['/x.json'], ['/noext'], ['/link.txt'],
	['/al/b.html'], ['/al/'], ['/al'], ['/tf/dir'], ['/tf/nothing'], ['/tf/a.txt'], ['/a.txt/'],
	['/a.txt?x=1'], ['/%61.txt'], ['/dir/../a.txt'], ['/./a.txt'], ['/dir?x=1'],
	['/ai/'], ['/ai/dir/'], ['/ai/', 'If-Match: *'], ['/ai/', 'If-None-Match: *'],
	['/ai/', "If-Unmodified-Since: $old"], ['/ai/', "If-Modified-Since: $later"],
	['/ai/', 'If-Match: "x"'], ['/et/a.txt', 'If-Match: *'], ['/et/a.txt', 'If-None-Match: *'],
	['/et/a.txt', 'If-None-Match: ETAG'], ['/et/a.txt', 'If-Match: ETAG'],
	['/et/a.txt', 'If-Range: ETAG', 'Range: bytes=0-1'], ['/ret', 'If-Match: "x"'],
	['/ret', 'If-None-Match: *'], ['/ret', "If-Unmodified-Since: $old"],
	['/ret', "If-Modified-Since: $later"], ['/missing', 'If-Match: "x"'],
	['/dir/', 'If-Match: "x"'],
	(map { ['/a.txt', $_] } qw/HEAD POST PUT DELETE OPTIONS/),
	['/a.txt', 'Range: bytes=0-1', 'HEAD'], ['/dir/', 'HEAD'], ['/missing', 'POST'],
	['/idx/', 'POST'], ['/dir', 'POST'], ['/dir/', 'POST'], ['/ai/', 'POST'], ['/tf/dir', 'POST'],
);

my ($etag) = http_get('/a.txt', PeerAddr => '127.0.0.1:' . port(8081)) =~ /^ETag: ([^\r]*)/mi;
for my $r (@req) { s/ETAG/$etag/ for @$r }

# What a client sees: "STATUS | field=value ... | body".
my ($diffs, $same) = beside_table(\@req, sub {
	my ($port, $head, $body) = @_;
	my @f = map { my ($v) = $head =~ /^\Q$_\E: ([^\r]*)/mi; defined $v ? "$_=$v" : () }
		qw/Content-Length Content-Range Content-Type ETag Last-Modified Accept-Ranges Location Allow/;
	if ($body =~ /Index of/) {
		# An autoindex listing: nginx chunks it.
		@f = grep { !/^Content-Length=/ } @f;
		$body =~ s/^[0-9a-f]+\r\n(.*)\r\n0\r\n\r\n\z/$1/s;
	}
	$body =~ s{<hr><center>(?:nginx|sluice)/[^<]*</center>}{<hr><center>SERVER</center>};
	$body =~ s/--\d{20}/--N/g;
	s/boundary=\d+/boundary=N/ for @f;
	my ($code) = $head =~ /^HTTP\/1\.1 (\d{3})/;
	return join(' | ', $code // 'none', @f, $body);
});
is(scalar(@$diffs), 0, scalar(@req) . " requests for files: sluice answers as nginx does ($same the same)")
	or diag(join("\n", @$diffs));
