#!/usr/bin/perl

# Debian's stock nginx configuration (nginx-common's /etc/nginx/nginx.conf,
# mime.types and sites-available/default), read from the installed package:
# it passes -t with only its /etc/nginx/ paths pointed at a copy (sluice has
# no dynamic modules, so modules-enabled/ is an empty directory here), and,
# with its log, pid, listen and root paths pointed into the test directory,
# it serves the default site: the index file, 404 from try_files, gzip.

use warnings;
use strict;

use Test::More;
use File::Copy qw/copy/;
use IO::Uncompress::Gunzip qw/gunzip/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $etc = '/etc/nginx';
plan(skip_all => "no Debian nginx configuration in $etc")
	unless -f "$etc/nginx.conf" && -f "$etc/sites-available/default" && -f "$etc/mime.types";

my $t = Test::Sluice->new()->has(qw/http/)->plan(8);
my $d = $t->testdir();
chmod 0755, $d;

sub slurp { my ($f) = @_; open my $fh, '<', $f or die "$f: $!\n"; local $/; <$fh> }
sub spew { my ($f, $s) = @_; open my $fh, '>', $f or die "$f: $!\n"; print $fh $s; close $fh }

mkdir "$d/nginx";
mkdir "$d/nginx/$_" for qw/modules-enabled conf.d sites-enabled snippets/;
copy("$etc/mime.types", "$d/nginx/mime.types") or die "copy: $!\n";
for my $f (glob "$etc/snippets/*") {
	copy($f, "$d/nginx/snippets/") or die "copy $f: $!\n";
}
my $conf = slurp("$etc/nginx.conf");
my $site = slurp("$etc/sites-available/default");

# 1. As shipped, only /etc/nginx/ moved.
(my $moved = $conf) =~ s!/etc/nginx/!$d/nginx/!g;
spew("$d/nginx/nginx.conf", $moved);
spew("$d/nginx/sites-enabled/default", $site);
my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', "$d/nginx/nginx.conf", '-t');
is($rc, 0, 'stock nginx.conf and sites-available/default pass -t') or diag($err);
unlike($err, qr/\[emerg\]/, '... with no [emerg]');

# 2. Served: logs, pid, listen and root in the test directory.
my $port = port(8080);
(my $served = $moved) =~ s!/var/log/nginx/!$d/!g;
$served =~ s!^(\s*pid\s+)\S+;!${1}$d/sluice.pid;!m;
$served =~ s!^(\s*user\s+\S+\s*;)!# $1!m unless $> == 0;
(my $served_site = $site) =~ s!listen 80 default_server;!listen 127.0.0.1:$port default_server;!;
$served_site =~ s!listen \[::\]:80 default_server;!!;
$served_site =~ s!root /var/www/html;!root $d/www;!;
spew("$d/nginx/nginx.conf", $served);
spew("$d/nginx/sites-enabled/default", $served_site);
mkdir "$d/www";
chmod 0755, "$d/www";
my $page = "<html><body>" . ('Welcome to the stock site. ' x 10) . "</body></html>\n";
spew("$d/www/index.nginx-debian.html", $page);
chmod 0644, "$d/www/index.nginx-debian.html";

$t->run(conf => "$d/nginx/nginx.conf", pid_file => "$d/sluice.pid");

my $r = http_get('/');
like($r, qr!^HTTP/1\.1 200 !, 'the default site serves /');
like($r, qr/Welcome to the stock site/, '... its index.nginx-debian.html');
like(http_get('/nothing/here'), qr!^HTTP/1\.1 404 !, 'try_files $uri $uri/ =404');

$r = http(<<EOF);
GET / HTTP/1.1
Host: localhost
Accept-Encoding: gzip
Connection: close

EOF
like($r, qr/^Content-Encoding: gzip\r$/mi, 'gzip on compresses text/html');
my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
# Chunked: take the chunks apart.
my $raw = '';
while ($body =~ s/^([0-9a-f]+)\r\n//i) {
	my $n = hex $1;
	last if $n == 0;
	$raw .= substr($body, 0, $n, '');
	$body =~ s/^\r\n//;
}
my $plain;
gunzip(\$raw => \$plain);
is($plain, $page, '... and the page comes back whole');

$t->stop();
ok(-s "$d/access.log", 'the access log the stock config names is written');
