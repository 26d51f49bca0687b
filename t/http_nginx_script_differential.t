#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on the rewrite module's
# script: if with every kind of condition (a variable, = and != with a
# quoted value before the parenthesis and an empty one, ~ ~* !~ !~*, -f
# -d -e -x and their negations), set with variables, break, rewrite ...
# last loops and their limit, return inside and after if; and the
# numbered captures through all of it (a negated match sets them, a
# regex that does not match clears them, a location's are kept by a
# regex without groups). The status and the body must be the same.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);
my $d = $t->testdir();
mkdir "$d/www";
mkdir "$d/www/dir";
$t->write_file('www/file', 'f');
$t->write_file('www/dir/index.html', 'idx');
chmod 0755, "$d/www/dir";
$t->write_file('www/exe', 'x');
chmod 0755, "$d/www/exe";

my $server = <<"EOF";
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        root $d/www;
        set \$srv s1;
        if (\$arg_srv) { set \$srv \$arg_srv; }
        location /t/ {
            set \$a "";
            if (\$arg_x) { set \$a "x=\$arg_x"; }
            if (\$arg_x = 0) { set \$a "zero"; }
            if (\$arg_x != "") { set \$b nonempty; }
            if (\$arg_x ~ ^(\\d+)\$) { set \$a "num\$1"; }
            if (\$arg_x ~* ^ABC) { set \$a "abc"; }
            if (\$arg_x !~ ^z) { set \$c notz; }
            if (\$arg_x !~* ^Z) { set \$e notZ; }
            if (-f \$document_root/\$arg_f) { set \$f file; }
            if (!-f \$document_root/\$arg_f) { set \$f nofile; }
            if (-d \$document_root/\$arg_f) { set \$g dir; }
            if (-e \$document_root/\$arg_f) { set \$h exists; }
            if (-x \$document_root/\$arg_f) { set \$i exec; }
            if (\$arg_brk) { break; }
            set \$j after;
            return 200 "a=\$a b=\$b c=\$c e=\$e f=\$f g=\$g h=\$h i=\$i j=\$j srv=\$srv 1=\$1";
        }
        location /l/ {
            rewrite ^/l/(\\d+)/(.*)\$ /l/\$2 last;
            rewrite ^/l/x(.*)\$ /m/\$1 last;
            return 200 "l \$uri \$args";
        }
        location /m/ {
            if (\$arg_r) { rewrite ^ /n/? last; }
            return 200 "m \$uri \$args";
        }
        location /n/ { return 200 "n \$uri \$args"; }
        location /loop/ { rewrite ^ /loop/ last; }
        location /s/ {
            set \$v "\$uri-\$arg_q";
            set \$w \$v\$v;
            return 200 "v=\$v w=\$w";
        }
        location /neg/ { if (\$arg_x !~ ^(\\d)(?<rest>.*)) { return 200 "no"; } return 200 "neg 1=\$1 rest=\$rest"; }
        location /rc/ {
            if (\$arg_x ~ ^(\\d+)) { }
            rewrite ^/zzz(.*) /q;
            return 200 "rc 1=\$1";
        }
        location ~ ^/loc/(\\d+) {
            if (\$arg_x ~ ^z) { }
            if (\$arg_y ~ ^(y)) { }
            return 200 "loc 1=\$1";
        }
        location /if/ {
            if (\$arg_p) { return 201 "in if \$arg_p"; }
            if (\$arg_e) { rewrite ^ /n/ break; }
            return 202 "out";
        }
    }
EOF
nginx_beside($t, $server);

my @req;
for my $x ('', '0', '12', 'abc', 'ABCD', 'z1', 'Z1', '%20', 'x') {
	for my $f ('', 'file', 'dir', 'exe', 'none', 'dir/index.html') {
		for my $extra ('', '&brk=1', '&srv=two') {
			push @req, "/t/?x=$x&f=$f$extra";
		}
	}
}
push @req, '/l/12/34/x9', '/l/1/2/3/4/5/6/7/8/9/10/11/12/x', '/l/xq?r=1', '/l/xq?a=b', '/l/5/xr?r=1',
	'/loop/', '/s/a?q=1', '/s/', '/if/?p=1', '/if/?e=1', '/if/', '/if/?p=1&e=1', '/t/',
	'/neg/?x=5ab', '/neg/?x=ab', '/rc/?x=42', '/loc/7?x=z', '/loc/7?x=a', '/loc/7?y=y', '/loc/7?x=z&y=n';

my (@diffs, $same);
for my $path (@req) {
	my @o = map {
		my $b = http("GET $path HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", raw => 1,
			PeerAddr => '127.0.0.1:' . port($_), timeout => 3) // '';
		my ($head, $body) = split /\r\n\r\n/, $b, 2;
		my ($code) = ($head // '') =~ /^HTTP\/1\.1 (\d{3})/;
		$body = '' unless ($code // 0) < 300;
		($code // 'none') . " | " . ($body // '');
	} 8081, 8080;
	if ($o[0] eq $o[1]) { $same++; next }
	push @diffs, "$path:\n  nginx  [$o[0]]\n  sluice [$o[1]]";
}
is(scalar(@diffs), 0, scalar(@req) . " requests: the same (" . ($same // 0) . ')')
	or diag(join("\n", @diffs[0 .. ($#diffs < 40 ? $#diffs : 40)]));
