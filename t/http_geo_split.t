#!/usr/bin/perl

# The geo and split_clients modules, http and stream. geo: networks
# (longest prefix, IPv4 and IPv6), delete, default, an address variable,
# ranges (a later range over an earlier one, delete of a whole range only,
# with nginx's warning for another), proxy with X-Forwarded-For; the values
# are nginx 1.22's for the same configuration. split_clients: the parts
# nginx gives keys k0..k59 (its MurmurHash2), a part set without "*" (a
# key past it gets ""). Broken blocks are refused by -t with FILE:LINE.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http geo split_clients stream/)->plan(19);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    geo $arg_a $g {
        default def;
        10.0.0.0/8 ten;
        10.1.0.0/16 ten-one;
        10.1.2.0/24 ten-one-two;
        127.0.0.1 lo;
        2001:db8::/32 doc;
        delete 10.1.0.0/16;
    }
    geo $arg_a $r {
        ranges;
        default none;
        10.0.0.1-10.0.0.9 low;
        10.0.0.5-10.0.0.6 mid;
        delete 10.0.0.2-10.0.0.2;
    }
    geo $p {
        proxy 127.0.0.1;
        default def;
        192.0.2.0/24 doc;
    }
    geo $plain { default d; 127.0.0.0/8 loopback; }

    split_clients "${arg_k}x" $v { 0.5% a; 20% b; 30.25% c; * d; }
    split_clients "$arg_k" $w { 50% one; 25% two; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "$g|$r|$p|$plain"; }
        location /split { return 200 "$v$w"; }
    }
}

stream {
    geo $sg { default other; 127.0.0.0/8 loopback; }
    split_clients "$remote_addr" $ss { 100% all; }
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        return "$sg $ss\n";
    }
}

EOF

$t->run();

sub body {
	my ($uri, %h) = @_;
	my $hdr = join '', map { "$_: $h{$_}\n" } keys %h;
	my $r = http("GET $uri HTTP/1.0\nHost: localhost\n$hdr\n") // '';
	$r =~ s/^.*?\r\n\r\n//s;
	return $r;
}

# The answers nginx 1.22 gave to the same blocks.
my %nginx = (
	'10.1.2.3' => 'ten-one-two|none',
	'10.1.3.3' => 'ten|none',
	'10.2.0.1' => 'ten|none',
	'127.0.0.1' => 'lo|none',
	'127.0.0.2' => 'def|none',
	'2001:db8::1' => 'doc|none',
	'junk' => 'def|none',
	'10.0.0.1' => 'ten|low',
	'10.0.0.2' => 'ten|low',
	'10.0.0.5' => 'ten|mid',
	'10.0.0.7' => 'ten|low',
	'10.0.0.10' => 'ten|none',
);
for my $a (sort keys %nginx) {
	is(body("/?a=$a"), "$nginx{$a}|def|loopback", "geo $a");
}
is(body('/', 'X-Forwarded-For' => '10.0.0.1, 192.0.2.7'), 'def|none|doc|loopback',
	'geo proxy takes the last X-Forwarded-For address');
like($t->read_file('error.log'), qr/\[warn\] .*no address range "10\.0\.0\.2-10\.0\.0\.2" to delete in \S+sluice\.conf:\d+/,
	'partial range delete warned');

my $nginx_split = 'c dtwo cone done btwo done done dtwo done cone bone done done btwo done cone c b bone b bone done b done done cone done done done ctwo bone done cone dtwo dtwo ctwo dtwo done bone dtwo dtwo done cone bone done d bone d c done ctwo bone bone dtwo cone bone done dtwo ctwo bone';
is(join(' ', map { body("/split?k=k$_") } 0 .. 59), $nginx_split, 'split_clients as nginx');
is(body('/split'), 'bone', 'split_clients of an empty key');

my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8081)) or die;
my $line = <$s> // '';
is($line, "loopback all\n", 'stream geo and split_clients');

# Broken blocks: -t refuses them with FILE:LINE.
sub refused {
	my ($block) = @_;
	$t->write_file('bad.conf', "events {}\nhttp {\n$block\n}\n");
	my $d = $t->testdir();
	my $bin = $t->binary();
	return scalar `$bin -p $d/ -c $d/bad.conf -t 2>&1`;
}
like(refused('split_clients $uri $v { 60% a; 50% b; }'), qr/percent total is greater than 100% in \S+bad\.conf:3/, 'split over 100%');
like(refused('geo $v { 10.0.0.0/33 a; }'), qr/invalid network "10\.0\.0\.0\/33" in \S+bad\.conf:3/, 'geo bad network');
