#!/usr/bin/perl

# Core variables real configs log: $request_id (32 hex digits, one per
# request, the same within it), $request_length (head and body bytes),
# $connection_requests (counting on a keep-alive connection),
# $sent_http_NAME (the response's headers, added ones included, empty when
# absent), $document_root and $realpath_root (links resolved) and
# $time_iso8601.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(13);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format core "$request_id $request_id|$request_length|$connection_requests|"
                    "$sent_http_content_type|$sent_http_x_added|[$sent_http_x_none]|"
                    "$document_root|$realpath_root|$time_iso8601";

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        root %%TESTDIR%%/link;
        access_log %%TESTDIR%%/core.log core;

        location / {
            add_header X-Added "yes";
            return 200 "id=$request_id";
        }
        location /two {
            add_header X-Added "yes";
            proxy_pass http://127.0.0.1:%%PORT_8081%%/echo;
        }
    }
}

EOF

mkdir "$d/real";
symlink("$d/real", "$d/link") or die "symlink: $!";
$t->backend(port(8081));
$t->run();

my $s = IO::Socket::INET->new("127.0.0.1:" . port(8080)) or die "connect: $!";
my $req1 = "GET /one HTTP/1.1\r\nHost: localhost\r\n\r\n";
my $req2 = "POST /two HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
$s->syswrite($req1 . $req2);
my $resp = '';
{
	local $SIG{ALRM} = sub { die "timeout\n" };
	alarm(8);
	while ($s->sysread(my $buf, 65536)) { $resp .= $buf }
	alarm(0);
}
my @ids = $resp =~ /id=([0-9a-f]+)/g;
like($resp, qr/hello\z/, 'two responses, the second proxied');

$t->stop();
my @lines = split /\n/, $t->read_file('core.log');
is(scalar @lines, 2, 'two log lines');
my @f1 = split /\|/, $lines[0];
my @f2 = split /\|/, $lines[1];

like($f1[0], qr/^([0-9a-f]{32}) \1$/, '$request_id: 32 hex digits, the same within a request');
is((split / /, $f1[0])[0], $ids[0] // '', '... the one the response had');
isnt((split / /, $f2[0])[0], (split / /, $f1[0])[0], '... another for the next request');
is($f1[1], length($req1), '$request_length: the head');
is($f2[1], length($req2), '... and the body');
is("$f1[2] $f2[2]", '1 2', '$connection_requests');
is("$f1[3]|$f1[4]|$f1[5]", 'text/plain|yes|[-]', '$sent_http_NAME');
is($f2[4], 'yes', '... of a proxied response');
is($f1[6], "$d/link", '$document_root');
is($f1[7], "$d/real", '$realpath_root');
like($f1[8], qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$/, '$time_iso8601');
